#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the default suite.
# This is the README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh  # .venv with every framework (and the test tools); nothing to do when installed
exec .venv/bin/dlbench run "$@"
