#!/usr/bin/env bash
# Set up a virtual environment with every framework dlbench supports, then run the tests.
# This is the README's test command; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e '.[all,test]'
# keras-hub (the fidelity check of the Keras models, gate/keras_hub_models.py) without its dependencies:
# its tensorflow-text requirement would install a second, full TensorFlow; building a model needs neither
.venv/bin/pip install -q --no-deps -c constraints.txt keras-hub
.venv/bin/ruff check src tests benchmarks
.venv/bin/lint-imports  # the layers contract in pyproject.toml: an upward import fails here
if [ "$#" -gt 0 ]; then  # tests named on the command line: one plain pytest run
  exec .venv/bin/python -m pytest -q "$@"
fi
# The tests run in parallel (pytest-xdist), one test process per core (at most 2 unless
# DLBENCH_TEST_WORKERS says otherwise), each pinned to its own cores by tests/conftest.py; tests that
# use machine-wide things (namespaces, Ray clusters, JVMs) take a lock (the machine_wide fixture).
workers=${DLBENCH_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')}
exec .venv/bin/python -m pytest -q -n "$workers"
