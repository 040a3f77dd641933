#!/usr/bin/env bash
# The nightly set: every test, with those over CI's time budget (DLBENCH_SLOW_TESTS=1: XLA and
# Keras-on-JAX/TF compiles, Ray clusters, long fault tests) and every model of each backend's gate
# (DLBENCH_TEST_ALL_MODELS=1). Run it before landing a change to the gate or a backend.
#
#   scripts/nightly.sh                     set up .venv as scripts/test.sh does, then every test
#   scripts/nightly.sh tests/test_x.py -k y   only those (one plain pytest run)
#   DLBENCH_PYTHON=PATH scripts/nightly.sh ...   use that interpreter as it is (no set-up), with this
#                                          checkout's src first on its path
#   DLBENCH_TEST_ALL_MODELS_EXCEPT=pytensor scripts/nightly.sh   every model but in those frameworks
#                                          (PyTensor's whole-zoo gate alone takes over an hour)
#
# First every per-framework environment is built from empty (.ci/envs.sh with DLBENCH_CI_FRESH=all: each
# recipe's lock into an empty environments folder with an empty uv cache, beside the cached environments
# the tests use); DLBENCH_NIGHTLY_FRESH="mxnet paddle" builds only those so, "" none. A build that fails
# fails the nightly set (after the tests); an unreachable package registry does not.
#
# It prints the settings it ran with, and its last line says the result and the seconds it took; the
# exit status is pytest's (a run that collected nothing, pytest's 5, is a failure here too).
set -uo pipefail
cd "$(dirname "$0")/.."
export DLBENCH_SLOW_TESTS=1 DLBENCH_TEST_ALL_MODELS=1
echo "nightly: DLBENCH_SLOW_TESTS=$DLBENCH_SLOW_TESTS DLBENCH_TEST_ALL_MODELS=$DLBENCH_TEST_ALL_MODELS" \
  "DLBENCH_TEST_ALL_MODELS_EXCEPT=${DLBENCH_TEST_ALL_MODELS_EXCEPT:-} ${*:-(every test)}"
start=$(date +%s)
envs_code=0
if [ -n "${DLBENCH_NIGHTLY_FRESH-all}" ]; then
  DLBENCH_CI_FRESH="${DLBENCH_NIGHTLY_FRESH-all}" bash .ci/envs.sh
  envs_code=$?
  [ "$envs_code" -eq 3 ] && envs_code=0  # the registry unreachable: said by envs.sh, not a failure here
fi
if [ -n "${DLBENCH_PYTHON:-}" ]; then
  PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" "$DLBENCH_PYTHON" -m pytest -q -p no:cacheprovider "${@:-tests}"
else
  bash scripts/test.sh "$@"
fi
code=$?
[ "$code" -eq 5 ] && echo "nightly: pytest collected no tests" >&2 && code=1
if [ "$code" -eq 0 ] && [ "$envs_code" -ne 0 ]; then
  echo "nightly: a per-framework environment did not build from empty (exit $envs_code of .ci/envs.sh)" >&2
  code=1
fi
echo "nightly: $([ "$code" -eq 0 ] && echo passed || echo "FAILED (exit $code)") in $(( $(date +%s) - start )) s"
exit "$code"
