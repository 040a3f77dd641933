#!/usr/bin/env bash
# The main environment (.venv): every framework dlbench supports in this Python, and the test tools.
# scripts/test.sh runs this first; .ci/run runs it beside the per-framework environments' builds, so
# that test.sh then finds it done. Done means: .venv/dlbench-installed holds the hash of what the
# install read (pyproject.toml, constraints.txt, this script); the install is editable, so a change
# to the source needs none, and a change to any of those three installs again. A failed install
# writes no stamp (the next run tries again).
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(cat pyproject.toml constraints.txt scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ "$(cat .venv/dlbench-installed 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
rm -f .venv/dlbench-installed
# made only when missing: .ci/run runs this while .ci/envs.sh uses the light .venv it made first
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e '.[all,test]'
# keras-hub (the fidelity check of the Keras models, gate/keras_hub_models.py) without its dependencies:
# its tensorflow-text requirement would install a second, full TensorFlow; building a model needs neither
.venv/bin/pip install -q --no-deps -c constraints.txt keras-hub
echo "$stamp" > .venv/dlbench-installed
