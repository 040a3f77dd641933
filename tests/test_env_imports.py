"""A measuring process in a framework's own environment has only that framework, NumPy and the standard
library: what the gate's worker imports must not need the main environment's packages."""

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_gate_imports_without_packaging():
    """``packaging`` (read by dlbench.envs.versions for a pinned ``jax==0.4.38``) is not in the environment
    frameworks' interpreters; importing the backends' registry and the gate failed there with
    ModuleNotFoundError, so every mxnet, paddle, chainer and pytensor cell failed."""
    code = ("import sys; sys.modules['packaging'] = None; sys.modules['pydantic'] = None\n"
            "import dlbench.frameworks, dlbench.gate.verify, dlbench.worker\n"
            "from dlbench.frameworks import framework_info; framework_info('paddle')")
    proc = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
