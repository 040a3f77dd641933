"""TensorFlow helpers shared by the ``tensorflow`` backend and the ``keras-tensorflow`` variant:
device names, the sync barrier, thread pools and build facts. Imports TensorFlow."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from dlbench.frameworks.base import UnsupportedError
from dlbench.measure.profile import ProfileTrace, complete_events, write_trace, xspace_events


def tf_device(device: str) -> str:
    """dlbench device name -> TF device string; 'cuda', 'cuda:1', 'gpu' map to TF's GPUs.

    On a GPU, TensorFlow runs float32 matmuls and convolutions as TF32 by default (Ampere and later),
    an error of about 1e-3 that the gate's float32 tolerance refuses: it is turned off here, as the
    torch and JAX backends do, for the models and the decoders alike."""
    if device == "cpu":
        return "/CPU:0"
    if device.startswith(("cuda", "gpu")):
        index = device.partition(":")[2] or "0"
        if not tf.config.list_physical_devices("GPU"):
            raise UnsupportedError("no GPU is visible to this TensorFlow build")
        tf.config.experimental.enable_tensor_float_32_execution(False)
        return f"/GPU:{index}"
    raise UnsupportedError(f"tensorflow backend: unknown device {device!r}")


def sync_tf() -> None:
    tf.test.experimental.sync_devices()


def tf_info() -> dict[str, Any]:
    """TF build facts: version, build info, XLA, oneDNN (on unless ``TF_ENABLE_ONEDNN_OPTS=0``)."""
    from tensorflow.python.util import _pywrap_util_port as port

    build = dict(tf.sysconfig.get_build_info())
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "build_info": {k: v for k, v in build.items() if not isinstance(v, list | dict) or v},
        "built_with_xla": tf.test.is_built_with_xla(),
        "built_with_cuda": tf.test.is_built_with_cuda(),
        "onednn_enabled": bool(port.IsMklEnabled()),
        "kernels": f"TensorFlow CPU kernels, oneDNN {'on' if port.IsMklEnabled() else 'off'} (XLA on the xla variant)",
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset (default on for x86 Linux)"),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }


def set_tf_threads(n: int) -> dict[str, Any]:
    """Intra- and inter-op pools of ``n`` threads; TF refuses once its context exists, then we report what it has."""
    note = ""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    except RuntimeError as exc:  # the context is already initialised
        note = str(exc)
    out: dict[str, Any] = {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                           "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}
    if note:
        out["note"] = note
    return out


def tf_profile(run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
    """TensorFlow's profiler over the calls: its XSpace (``*.xplane.pb``, what TensorBoard's profile
    plug-in reads) converted to a Chrome trace; operations are the events TensorFlow gives an op type
    (``matmul:MatMul``) and, in an XLA-compiled cluster (Keras's ``jit_compile``), the HLO instructions
    it ran (``convolution.2``), which have no op type."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    tf.profiler.experimental.start(str(outdir))
    try:
        for _ in range(calls):
            run()
            sync_tf()
    finally:
        tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    space.ParseFromString(max(outdir.glob("plugins/profile/*/*.xplane.pb")).read_bytes())
    events = xspace_events(space)
    path = write_trace(events, outdir / "trace.json")
    return ProfileTrace(path, complete_events(events, lambda e: {"op_type", "hlo_op"} & e.get("args", {}).keys()),
                        f"tf.profiler (tensorflow {tf.__version__})")
