#!/usr/bin/env bash
# CI: build the per-framework environments (dlbench envs create) that the tests of the backends living
# outside the main Python need (mxnet, chainer, pytensor, paddle, h2o). Idempotent: an environment
# that exists (it has its dlbench-env.json record) is kept, so a CI cache of $DLBENCH_ENVS_DIR
# (default ~/.cache/dlbench/envs; key it on src/dlbench/envs/requirements/*) makes this a no-op.
# The environments are built in parallel (the work is mostly downloads). Run it after the main
# environment exists (scripts/test.sh makes .venv), then the tests pick the environments up.
# Exit 1 if any environment failed; each failure prints pip's own error.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then  # the main environment, light: the envs command needs no framework
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c constraints.txt -e .
fi
PY=.venv/bin/python
FRAMEWORKS="${DLBENCH_CI_ENVS:-mxnet chainer pytensor paddle h2o}"
logs=$(mktemp -d)
start=$(date +%s)
pids=()
for fw in $FRAMEWORKS; do
  PYTHONPATH=src "$PY" -m dlbench envs create "$fw" >"$logs/$fw.txt" 2>&1 &
  pids+=("$!")
done
code=0
i=0
for fw in $FRAMEWORKS; do
  if wait "${pids[$i]}"; then
    tail -n 1 "$logs/$fw.txt"
  else
    echo "CI: environment $fw failed:" >&2
    cat "$logs/$fw.txt" >&2
    code=1
  fi
  i=$((i + 1))
done
echo "CI: environments ready in $(( $(date +%s) - start )) s"
PYTHONPATH=src "$PY" -m dlbench envs list
rm -rf "$logs"
exit "$code"
