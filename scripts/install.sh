#!/usr/bin/env bash
# The main environment (.venv): every framework dlbench supports in this Python, and the test tools.
# scripts/test.sh and scripts/demo.sh run this first; .ci/run runs it beside the per-framework
# environments' builds, so that test.sh then finds it done. Done means: .venv/dlbench-installed holds the
# hash of what the install read (pyproject.toml, constraints.txt, this script, scripts/uv_args.py); the
# install is editable, so a change to the source needs none, and a change to any of those installs again.
# A failed install writes no stamp (the next run tries again).
#
# --light: dlbench without any framework (what `dlbench envs` needs), no stamp: .ci/run makes it first so
# that the environments' builds can start while the full install runs.
#
# uv installs (about 10 s where pip takes about 90 on the 2-core machine: docs/ci.md) with pip's own
# configuration translated by scripts/uv_args.py (uv reads no pip.conf: a local CPU build of torch would be
# missed); where a setting has no translation, or uv fails, pip installs, as it always did. --compile-bytecode:
# as pip does, so that no process compiles what it imports (with PYTHONDONTWRITEBYTECODE=1, as on the CI
# machine, every process would, and the tests took 16 min instead of 13).
set -euo pipefail
cd "$(dirname "$0")/.."
light=0
[ "${1:-}" = --light ] && light=1
stamp=$(cat pyproject.toml constraints.txt scripts/install.sh scripts/uv_args.py | sha256sum | cut -d' ' -f1)
if [ "$light" = 1 ] && [ -x .venv/bin/dlbench ]; then  # dlbench is installed (light or full)
  exit 0
fi
if [ "$light" = 0 ] && [ -x .venv/bin/python ] && [ "$(cat .venv/dlbench-installed 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
[ "$light" = 1 ] || rm -f .venv/dlbench-installed
# made only when missing: .ci/run runs this while .ci/envs.sh uses the light .venv it made first
[ -x .venv/bin/python ] || python3 -m venv .venv

uv_options=()
use_uv() {  # uv and pip's configuration in its words, or say why not (DLBENCH_INSTALLER=pip: pip, as asked)
  local opts
  [ "${DLBENCH_INSTALLER:-uv}" = pip ] && return 1
  opts=$(.venv/bin/python scripts/uv_args.py) && [ -n "$opts" ] || return 1
  [ -x .venv/bin/uv ] || .venv/bin/pip install -q -c constraints.txt uv || return 1
  mapfile -t uv_options <<< "$opts"
}
install() {  # pip install's arguments: uv with pip's settings, else pip
  if [ "${#uv_options[@]}" -gt 0 ]; then
    .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${uv_options[@]}" "$@" && return 0
    echo "install.sh: uv could not install $*; installing with pip" >&2
  fi
  .venv/bin/pip install -q "$@"
}
use_uv || uv_options=()
install --upgrade pip
if [ "$light" = 1 ]; then
  install -c constraints.txt -e .
  exit 0
fi
install -c constraints.txt -e '.[all,test]'
# keras-hub (the fidelity check of the Keras models, gate/keras_hub_models.py) without its dependencies:
# its tensorflow-text requirement would install a second, full TensorFlow; building a model needs neither
install --no-deps -c constraints.txt keras-hub
echo "$stamp" > .venv/dlbench-installed
