#!/usr/bin/env bash
# CI: build the per-framework environments (dlbench envs create) that the tests of the backends living
# outside the main Python need. A build that fails fails CI: this script prints uv's (or pip's) own error and
# exits 1, and .ci/run then exits non-zero after the tests (which skip the missing environments'
# backends). The one exception is a package registry that cannot be reached at all (no network, an
# outage): then nothing can be built, this script says so and exits 3, and .ci/run goes on green.
#
# Which environments: every recipe (mxnet, chainer, pytensor, paddle, h2o), built in parallel from their
# locks (src/dlbench/envs/requirements/NAME.lock, installed by uv). DLBENCH_CI_ENVS="mxnet chainer" (a
# list) builds only those; "cached" builds mxnet and chainer plus every other recipe already in
# $DLBENCH_ENVS_DIR (default ~/.cache/dlbench/envs). An environment is keyed by its lock: `envs create`
# reuses one whose recorded lock hash equals its lock's and rebuilds every one whose lock changed, so a
# cache of that directory (key it on src/dlbench/envs/requirements/*) heals itself.
#
# A fresh build on every run: a cached environment proves nothing about a new machine (issue 41: Paddle
# stayed green on a cached environment while it could not be built from scratch), so one recipe,
# DLBENCH_CI_FRESH (default: mxnet, the cheapest from empty: docs/environments.md), is also built into an
# EMPTY environments folder with an EMPTY uv cache, that is downloaded and hash-checked from the registry,
# then thrown away. DLBENCH_CI_FRESH="" skips it, "all" builds every recipe so (scripts/nightly.sh does).
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -z "${DLBENCH_PYTHON:-}" ] && [ ! -x .venv/bin/python ]; then  # the main environment, light: the envs
  bash scripts/install.sh --light                                   # command needs no framework
fi
PY=${DLBENCH_PYTHON:-.venv/bin/python}  # DLBENCH_PYTHON: an interpreter with dlbench's dependencies, used as it is
dlb() { PYTHONPATH=src "$PY" -m dlbench "$@"; }
ALL=$(dlb envs list --json | "$PY" -c 'import json, sys; print(" ".join(json.load(sys.stdin)["recipes"]))')
case "${DLBENCH_CI_ENVS:-all}" in
  cached)
    FRAMEWORKS="mxnet chainer"
    for fw in $ALL; do  # cached ones: create is a no-op when the lock matches
      case " $FRAMEWORKS " in *" $fw "*) ;; *) [ -f "${DLBENCH_ENVS_DIR:-$HOME/.cache/dlbench/envs}/$fw/dlbench-env.json" ] && FRAMEWORKS="$FRAMEWORKS $fw" ;; esac
    done ;;
  all) FRAMEWORKS="$ALL" ;;
  *) FRAMEWORKS="$DLBENCH_CI_ENVS" ;;
esac
FRESH=${DLBENCH_CI_FRESH-mxnet}
[ "$FRESH" = all ] && FRESH=$ALL
logs=$(mktemp -d)
start=$(date +%s)
pids=()
for fw in $FRAMEWORKS; do
  dlb envs create "$fw" >"$logs/$fw.txt" 2>&1 &
  pids+=("$!")
done
for fw in $FRESH; do  # from empty: an environments folder and a uv cache of its own
  mkdir -p "$logs/fresh/$fw"
  DLBENCH_ENVS_DIR="$logs/fresh/$fw/envs" UV_CACHE_DIR="$logs/fresh/$fw/uv-cache" dlb envs create "$fw" \
    >"$logs/fresh-$fw.txt" 2>&1 &
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
for fw in $FRESH; do
  if wait "${pids[$i]}"; then
    echo "CI: $fw built from an empty environments folder and an empty uv cache: $(tail -n 1 "$logs/fresh-$fw.txt")"
  else
    echo "CI: environment $fw failed to build from an empty environments folder and an empty uv cache:" >&2
    cat "$logs/fresh-$fw.txt" >&2
    code=1
  fi
  i=$((i + 1))
done
# Whether the registry pip installs from answers at all: when it does not, the failures above are the
# network's, not the recipes'.
INDEX=${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-${PIP_INDEX_URL:-https://pypi.org/simple}}}
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
echo "CI: environments ($FRAMEWORKS${FRESH:+; from empty: $FRESH}) ready in $(( $(date +%s) - start )) s; not built: $(for fw in $ALL; do case " $FRAMEWORKS " in *" $fw "*) ;; *) printf '%s ' "$fw" ;; esac; done)"
dlb envs list
rm -rf "$logs"
exit "$code"
