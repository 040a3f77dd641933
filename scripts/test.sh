#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the tests.
# This is the README's test command; CI runs exactly this.
set -uo pipefail
set -e
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e '.[all,test]'
.venv/bin/ruff check src tests benchmarks
if [ "$#" -gt 0 ]; then  # tests named on the command line: one plain pytest run
  exec .venv/bin/python -m pytest -q "$@"
fi
# Two phases: the tests in parallel (pytest-xdist, one process per core, each test process pinned to
# its own cores by tests/conftest.py), then those marked serial (machine-wide namespaces, Ray
# clusters, JVMs, process scans) alone. DLBENCH_TEST_WORKERS sets the first phase's processes.
workers=${DLBENCH_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')}
code=0
.venv/bin/python -m pytest -q -n "$workers" -m "not serial" || code=$?
.venv/bin/python -m pytest -q -m serial || { c=$?; [ "$c" -ne 5 ] && [ "$code" -eq 0 ] && code=$c; }  # 5: none selected
exit "$code"
