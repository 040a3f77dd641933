"""The survey's ONNX export check, on ONNX Runtime's side: every probe that exports LeNet (torch, JAX,
TensorFlow, Keras) runs the file here and compares it with its framework's own output. ONNX Runtime is
imported when a check runs, never when a probe is imported."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def ort_run(path: str, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def onnx_compare(path: str, x: np.ndarray, expected: np.ndarray) -> dict:
    """Run an exported file in ONNX Runtime on ``x`` and compare with the framework's output."""
    import onnxruntime as ort

    got = ort_run(path, x)
    return {"onnxruntime": ort.__version__, "onnx_bytes": _size(path), "output_shape": list(got.shape),
            "max_abs_diff": float(np.abs(got.astype(np.float64) - expected.astype(np.float64)).max()),
            "max_abs_output": float(np.abs(expected).max())}


def _size(path: str) -> int:
    """The .onnx file plus external-data files beside it."""
    folder = Path(path).parent
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())

