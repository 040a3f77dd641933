#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the default suite.
# This is the README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e '.[all]'
exec .venv/bin/dlbench run "$@"
