"""OpenVINO backend: Intel's inference engine, inference only, from the same ONNX export ONNX
Runtime runs.

The network is built by dlbench's torch backend and exported to ONNX exactly as for ONNX Runtime
(:mod:`dlbench.frameworks.onnxruntime`, whose backend this one extends: same exporters, same
fallback, same run-scoped export cache), so both engines run the same graph with the same weights;
OpenVINO reads the ONNX bytes (``Core.read_model``) rather than converting from torch itself
(``ov.convert_model``), which would be a second, different export. Parameters are read back from the
exported graph's initializers, as for ONNX Runtime (the gate checks them there). The export path is
shared, so this backend needs onnxruntime installed beside openvino.

Fast path and fairness settings (what OpenVINO's own ``benchmark_app`` does for a latency run):

* the graph is reshaped to the placed batch's static shapes and compiled for them on ``CPU``
  (one compiled model per input shape, made in ``place``, outside any timing): OpenVINO's CPU
  plug-in picks its kernels and layouts per static shape, a dynamic-batch graph is slower;
* ``PERFORMANCE_HINT = LATENCY`` and ``NUM_STREAMS = 1`` (one inference at a time, like every
  other backend's closure), ``INFERENCE_NUM_THREADS`` = the ``set_threads`` count (OpenVINO's
  default, every core, when never set);
* ``INFERENCE_PRECISION_HINT = f32``: on a CPU with AVX-512 BF16 or AMX, OpenVINO's default runs
  in bf16, which would be a different precision from every other fp32 cell (and fail the gate);
* one infer request per placed batch, its input tensors sharing the batch's memory; the timed
  closure is the synchronous ``infer()``, which returns when the output is computed (``sync`` has
  nothing to wait for).

GPU: OpenVINO's ``GPU`` plug-in drives Intel GPUs, not CUDA, so ``cuda`` is unsupported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import openvino as ov

from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.onnxruntime import Exported, OnnxRuntimeBackend, _version
from dlbench.models.spec import ModelSpec

NOT_TRAINABLE = ("openvino is an inference engine: the exported ONNX graph is the eval-mode forward only, "
                 "so {what} is not measured")


@dataclass
class OvModel:
    spec: ModelSpec
    graph: ov.Model
    input_names: tuple[str, ...]
    device: str
    bindings: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]]
    params: dict[str, np.ndarray]
    build_info: dict[str, Any]
    config: dict[str, Any]
    #: compiled models by the input shapes they were compiled for
    compiled: dict[tuple, ov.CompiledModel] = field(default_factory=dict)


class OpenVinoBackend(OnnxRuntimeBackend):
    name = "openvino"
    variants = ("default",)
    devices = ("cpu",)
    scenarios = ("forward",)
    packages = ("openvino", "onnx", "onnxscript", "onnxruntime", "torch")

    def __init__(self) -> None:
        super().__init__()
        self.core = ov.Core()

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        self._torch.set_threads(n)
        return {"inference_num_threads": n}

    def providers(self, device: str) -> list:
        if device != "cpu":
            raise UnsupportedError(f"openvino's GPU plug-in drives Intel GPUs; dlbench runs it on the CPU only, "
                                   f"not {device!r}")
        return ["CPU"]

    def config(self) -> dict[str, Any]:
        return {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": self.threads or 0,
                "INFERENCE_PRECISION_HINT": "f32"}

    def _session(self, onnx_bytes: bytes, providers: list) -> tuple[ov.Model, str]:
        """The graph as OpenVINO reads it (compiled per input shape in :meth:`place`)."""
        return self.core.read_model(onnx_bytes, ov.Tensor(np.empty(0, np.uint8))), "off"

    def runtime_info(self, session: ov.Model) -> dict[str, Any]:
        return {"device": "CPU", **self.config()}

    def model(self, spec: ModelSpec, session: ov.Model, device: str, bindings: dict, exported: Exported,
              info: dict[str, Any]) -> OvModel:
        names = tuple(i.get_any_name() for i in session.inputs)
        return OvModel(spec, session, names, device, bindings, exported.params, info, self.config())

    def build_compile_ns(self, model: OvModel) -> dict[str, float]:
        return {"read_model": float(model.build_info["session_ns"])}

    def compiled(self, model: OvModel, shapes: dict[str, tuple[int, ...]]) -> ov.CompiledModel:
        """The graph compiled for these input shapes (once per shape; the time goes in build_info)."""
        key = tuple(sorted(shapes.items()))
        if key not in model.compiled:
            graph = model.graph.clone()
            graph.reshape({name: ov.PartialShape(list(shape)) for name, shape in shapes.items()})
            started = time.perf_counter()
            compiled = self.core.compile_model(graph, "CPU", model.config)
            model.build_info.setdefault("compile_s", {})[str(key)] = round(time.perf_counter() - started, 3)
            model.build_info["inference_num_threads"] = compiled.get_property("INFERENCE_NUM_THREADS")
            model.build_info["inference_precision"] = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
            model.compiled[key] = compiled
        return model.compiled[key]

    def place(self, batch: Batch, model: OvModel) -> dict[str, Any]:
        arrays = {"x": np.ascontiguousarray(batch.x)}
        if "mask" in model.input_names:
            if batch.mask is None:
                raise ValueError(f"{model.spec.name} takes a mask and the batch has none")
            arrays["mask"] = np.ascontiguousarray(batch.mask, dtype=np.float32)
        compiled = self.compiled(model, {name: arrays[name].shape for name in model.input_names})
        request = compiled.create_infer_request()
        for name in model.input_names:
            request.set_tensor(name, ov.Tensor(arrays[name], shared_memory=True))
        return {"arrays": arrays, "request": request}

    def forward(self, model: OvModel, batch) -> Callable[[], Any]:
        request = batch["request"]

        def run():
            request.infer()
            return request.get_output_tensor(0)
        run.placed = batch  # the input tensors share the placed arrays' memory: they live as long as the closure
        return run

    def gradient(self, model: OvModel, batch) -> Callable[[], Any]:
        raise UnsupportedError(NOT_TRAINABLE.format(what="the gradient scenario"))

    def train_step(self, model: OvModel, batch, opt) -> Callable[[], Any]:
        raise UnsupportedError(NOT_TRAINABLE.format(what="the train_step scenario"))

    def loss_and_grads(self, model: OvModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        raise UnsupportedError(NOT_TRAINABLE.format(what="the loss and its gradients"))

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.array(out.data)

    def info(self) -> dict[str, Any]:
        return {"openvino": ov.__version__, "onnx": _version("onnx"), "torch": _version("torch"),
                "cpu_capabilities": self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
                "kernels": f"OpenVINO {ov.__version__} CPU plug-in (oneDNN-based), "
                           f"{'/'.join(self.core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))}",
                "inference_num_threads": self.threads or "OpenVINO default (every core)",
                "settings": self.config(), "exports": self.exports}


Backend_ = OpenVinoBackend
