#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the tests.
# This is the README's test command; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh  # .venv with every framework; nothing to do when it is installed from these files
.venv/bin/ruff check src tests benchmarks
.venv/bin/lint-imports  # the layers contract in pyproject.toml: an upward import fails here
# dlbench's own bytecode, as an install compiles a package's: the tests start hundreds of processes, and where
# PYTHONDONTWRITEBYTECODE=1 (the CI machine) each would compile every dlbench module it imports again
.venv/bin/python -m compileall -q -j 0 src > /dev/null
if [ "$#" -gt 0 ]; then  # tests named on the command line: one plain pytest run
  exec .venv/bin/python -m pytest -q "$@"
fi
# The tests run in parallel (pytest-xdist), one test process per core (at most 2 unless
# DLBENCH_TEST_WORKERS says otherwise), each pinned to its own cores by tests/conftest.py; tests that
# use machine-wide things (namespaces, Ray clusters, JVMs) take a lock (the machine_wide fixture).
# --dist loadgroup: the groups tests/conftest.py names (the machine-wide tests; a module whose tests share
# a module-scoped fixture; one framework's gate) each run whole in one test process, so nothing is made
# twice and no process waits on the other's lock; every other test is balanced one at a time.
workers=${DLBENCH_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')}
# DLBENCH_TEST_ARGS: more pytest options (benchmarks/ci_time.py --durations passes --durations=N)
# shellcheck disable=SC2086
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadgroup ${DLBENCH_TEST_ARGS:-}
