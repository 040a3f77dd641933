#!/usr/bin/env bash
# CI: build the per-framework environments (dlbench envs create) that the tests of the backends living
# outside the main Python need. A build that fails fails CI: this script prints pip's own error and
# exits 1, and .ci/run then exits non-zero after the tests (which skip the missing environments'
# backends). The one exception is a package registry that cannot be reached at all (no network, an
# outage): then nothing can be built, this script says so and exits 3, and .ci/run goes on green.
#
# Which environments: every recipe (mxnet, chainer, pytensor, paddle, h2o), built in parallel: on the
# 2-core reference machine all five together took 101 s from scratch (docs/environments.md). DLBENCH_CI_ENVS="mxnet chainer" (a list) builds only those; "cached"
# builds mxnet and chainer plus every other recipe already in $DLBENCH_ENVS_DIR (default
# ~/.cache/dlbench/envs). `envs create` reuses an environment whose recorded requirements equal its
# recipe's and rebuilds one whose recipe changed, so a cache of that directory (key it on
# src/dlbench/envs/requirements/*) heals itself.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -z "${DLBENCH_PYTHON:-}" ] && [ ! -x .venv/bin/python ]; then  # the main environment, light: the envs
  python3 -m venv .venv                                             # command needs no framework
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c constraints.txt -e .
fi
PY=${DLBENCH_PYTHON:-.venv/bin/python}  # DLBENCH_PYTHON: an interpreter with dlbench's dependencies, used as it is
dlb() { PYTHONPATH=src "$PY" -m dlbench "$@"; }
ALL=$(dlb envs list --json | "$PY" -c 'import json, sys; print(" ".join(json.load(sys.stdin)["recipes"]))')
case "${DLBENCH_CI_ENVS:-all}" in
  cached)
    FRAMEWORKS="mxnet chainer"
    for fw in $ALL; do  # cached ones: create is a no-op when the requirements match
      case " $FRAMEWORKS " in *" $fw "*) ;; *) [ -f "${DLBENCH_ENVS_DIR:-$HOME/.cache/dlbench/envs}/$fw/dlbench-env.json" ] && FRAMEWORKS="$FRAMEWORKS $fw" ;; esac
    done ;;
  all) FRAMEWORKS="$ALL" ;;
  *) FRAMEWORKS="$DLBENCH_CI_ENVS" ;;
esac
logs=$(mktemp -d)
start=$(date +%s)
pids=()
for fw in $FRAMEWORKS; do
  dlb envs create "$fw" >"$logs/$fw.txt" 2>&1 &
  pids+=("$!")
done
code=0
i=0
for fw in $FRAMEWORKS; do
  if wait "${pids[$i]}"; then
    tail -n 1 "$logs/$fw.txt"
  else
    echo "CI: environment $fw failed (its tests will skip):" >&2
    cat "$logs/$fw.txt" >&2
    code=1
  fi
  i=$((i + 1))
done
# Whether the registry pip installs from answers at all: when it does not, the failures above are the
# network's, not the recipes'.
INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}
if [ "$code" -ne 0 ] && ! "$PY" - "$INDEX" <<'PYEOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/pip/", timeout=15).close()
except Exception as exc:
    print(f"CI: {exc}", file=sys.stderr)
    sys.exit(1)
PYEOF
then
  echo "CI: the package registry ($INDEX) cannot be reached: environments not built; their backends' tests skip" >&2
  code=3
fi
echo "CI: environments ($FRAMEWORKS) ready in $(( $(date +%s) - start )) s; not built: $(for fw in $ALL; do case " $FRAMEWORKS " in *" $fw "*) ;; *) printf '%s ' "$fw" ;; esac; done)"
dlb envs list
rm -rf "$logs"
exit "$code"
