#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the tests.
# This is the README's test command; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e '.[all,test]'
.venv/bin/ruff check src tests benchmarks
exec .venv/bin/python -m pytest -q "$@"
