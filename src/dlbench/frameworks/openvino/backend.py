"""OpenVINO backend: Intel's inference engine, forward only, on the CPU, from the same ONNX export
ONNX Runtime runs.

The network is built by dlbench's torch backend and exported to ONNX by
:mod:`dlbench.frameworks.onnxruntime.onnx_export`, the code the ONNX Runtime backend uses (same exporters, same
fallback, the same run-scoped export cache, so a run with both engines exports once), and OpenVINO
reads the ONNX bytes (``Core.read_model``). Why not OpenVINO's own converter from torch
(``ov.convert_model``): that would be a second, different export; from the one export both engines
run the same graph with bit-identical weights, read back for the gate from the same initializers,
and a difference between them is the engine's. onnxruntime is not needed.

Fast path and fairness settings (what OpenVINO's own ``benchmark_app`` does for a latency run),
read back from every compiled model and recorded in ``build_info``:

* the graph is reshaped to the placed batch's static shapes and compiled for them on ``CPU``
  (one compiled model per input shape, made in ``place``, outside any timing): the CPU plug-in
  picks its kernels and layouts per static shape, a dynamic-batch graph is slower;
* ``PERFORMANCE_HINT = LATENCY`` and ``NUM_STREAMS = 1``: one stream holding every thread, for the
  one synchronous request a timed call is. ``THROUGHPUT`` splits the threads into several streams,
  which pays only with several requests in flight (``AsyncInferQueue``); one synchronous request
  would run on one stream's share of the threads;
* ``INFERENCE_NUM_THREADS`` = the ``set_threads`` count (the CPU plug-in's default, one per
  physical core, when never set), set on the plug-in and on every compile and read back from the
  compiled model: a compiled model with another count is refused. ``ENABLE_HYPER_THREADING = True``
  so that all n cores the worker pinned count, as ONNX Runtime's n intra-op threads do (the latency
  default leaves hyper-thread siblings idle). ``ENABLE_CPU_PINNING`` keeps the plug-in's default,
  inside the affinity the worker set;
* ``INFERENCE_PRECISION_HINT = f32``: the CPU plug-in's default is bf16 on CPUs with AVX-512 BF16
  or AMX (and f16 on ARM), a different precision from every other fp32 cell, which the gate would
  fail. The compiled model's precision is read back and a model not compiled for f32 is refused;
* ``bf16`` cells ask ``INFERENCE_PRECISION_HINT = bf16``, OpenVINO's own way to run a float32 graph in
  bfloat16: the plug-in converts the weights of its matrix operations to bfloat16 once, at compile,
  and computes them in bfloat16 (where the CPU has it natively; elsewhere it keeps f32, read back and
  refused). ``precision_info`` reads the precisions off the compiled model's runtime graph: every
  fully connected, matmul and convolution node's runtime precision, and the type its weights are
  reordered into (:func:`runtime_precisions`);
* one infer request per placed batch, its input tensors sharing the batch's memory (the closure
  holds the placed batch, so the memory lives as long as it does); the timed closure is the
  synchronous ``infer()``, which returns when the output is computed (``sync`` has nothing to wait
  for); the output tensor is copied by ``to_numpy`` only;
* if ``DLBENCH_CACHE_DIR`` is set, OpenVINO's model cache (``CACHE_DIR``) lives there, so the
  compile scenario's warm process loads compiled blobs; each shape's compile time and whether its
  blob came from the cache are in ``build_info["compile_s"]`` and ``["model_cache"]``; the compile
  scenario reports ``read_model`` and ``compile_model`` (the shapes placed so far) as its build steps.

Gate rules as for ONNX Runtime (``param_count``, ``get_params`` from the exported initializers,
torch's second LSTM bias as ``param_count_extra``; ``gradient``, ``train_step`` and
``loss_and_grads`` raise :class:`UnsupportedError`). GPU: OpenVINO's ``GPU`` plug-in drives Intel
GPUs, not CUDA, so ``cuda`` is unsupported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import openvino as ov
import torch

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.onnxruntime.onnx_export import (
    ExportEngine,
    forward_module,
)
from dlbench.frameworks.openvino import DECLARATION
from dlbench.frameworks.torch import backend as torch_backend
from dlbench.measure.profile import ProfileTrace, write_trace
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the compiled model's properties recorded with every compile
RECORDED = ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT",
            "EXECUTION_MODE_HINT", "ENABLE_HYPER_THREADING", "ENABLE_CPU_PINNING")


#: dlbench precision -> OpenVINO's inference precision hint
HINTS = {"fp32": "f32", "bf16": "bf16"}
#: OpenVINO's short element type names -> numpy's
OV_TYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i8": "int8", "u8": "int8"}
#: the runtime graph's layer types that multiply: their runtime precision is the compute precision
COMPUTING = ("FullyConnected", "MatMul", "Convolution", "GroupConvolution", "Deconvolution", "RNNSeq", "RNNCell")
#: those that only look up a constant table (embeddings): their table's type counts as a parameter's
LOOKUPS = ("Gather",)


def _one(types: set[str]) -> str:
    """One type, or ``mixed:a,b`` (which no precision expects, so the gate names it)."""
    return next(iter(types)) if len(types) == 1 else "mixed:" + ",".join(sorted(types)) if types else "none"


def _layer(node: Any) -> str:
    return node.get_rt_info()["layerType"].astype(str)


def _constant(node: Any) -> bool:
    """Whether ``node`` is a constant, or a constant reordered, transposed or converted at compile."""
    while _layer(node) in ("Reorder", "Transpose", "Convert", "Reshape"):
        node = node.input(0).get_source_output().get_node()
    return _layer(node) == "Const"


def runtime_precisions(compiled: ov.CompiledModel) -> dict[str, str]:
    """What the CPU plug-in runs, read off the compiled model's runtime graph: ``compute_dtype``, the
    runtime precision of every multiplying node (:data:`COMPUTING`); ``param_dtype``, that of the nodes
    whose weights are constants (a node reads its inputs in its runtime precision, the plug-in
    converting constant weights once, at compile: bf16 weights are visible as a reorder only for some
    node types, inside oneDNN's primitive for the others). Embedding tables, which only lookups read,
    stay f32 under the bf16 hint and count only in a graph of lookups alone."""
    compute, params, tables = set(), set(), set()
    for op in compiled.get_runtime_model().get_ordered_ops():
        if _layer(op) in LOOKUPS and _constant(op.input(0).get_source_output().get_node()):
            kind = op.get_rt_info()["runtimePrecision"].astype(str)
            tables.add(OV_TYPES.get(kind, kind))
        if _layer(op) not in COMPUTING:
            continue
        kind = op.get_rt_info()["runtimePrecision"].astype(str)
        compute.add(OV_TYPES.get(kind, kind))
        weights = list(op.inputs())[1:2]  # the second input: weights, or an activation in attention's matmuls
        if weights and _constant(weights[0].get_source_output().get_node()):
            params.add(OV_TYPES.get(kind, kind))
    # the weights the arithmetic reads; a graph of lookups alone (an embeddings part) by its tables, which
    # OpenVINO keeps in f32 under the bf16 hint (a lookup has no arithmetic to lower)
    return {"param_dtype": _one(params or tables), "compute_dtype": _one(compute)}


@dataclass
class OvModel:
    spec: ModelSpec
    graph: ov.Model
    input_names: tuple[str, ...]
    #: canonical name -> (torch parameter name, torch layout -> canonical)
    bindings: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]]
    #: parameter initializers of the exported graph, by torch parameter name
    params: dict[str, np.ndarray]
    #: exporter, opset, the compiled models' settings, export and compile times
    build_info: dict[str, Any]
    #: compiled models by the input shapes they were compiled for
    compiled: dict[tuple, ov.CompiledModel] = field(default_factory=dict)


class InferRun:
    """The timed closure: one synchronous ``infer()`` of the placed batch's request. It holds the
    placed batch (the input tensors share its arrays' memory, which must live as long as the closure)
    and the model, which ``profile`` compiles again with performance counters on."""

    def __init__(self, model: OvModel, placed: dict[str, Any]):
        self.model, self.arrays, self.request = model, placed["arrays"], placed["request"]

    def __call__(self) -> ov.Tensor:
        self.request.infer()
        return self.request.get_output_tensor(0)


class OpenVinoBackend(ExportEngine):
    declaration = DECLARATION
    not_trainable = ("openvino is an inference engine: the exported ONNX graph is the eval-mode forward only, "
                     "so {what} is not measured")
    packages = ("openvino", "onnx", "onnxscript", "torch")

    def __init__(self) -> None:
        self.threads: int | None = None
        self.precision = DEFAULT_PRECISION
        self.exports: list[dict[str, Any]] = []
        self.core = ov.Core()
        self._torch = torch_backend.TorchBackend()

    # --- set-up -----------------------------------------------------------------------
    def set_threads(self, n: int) -> dict[str, Any]:
        """Set on the CPU plug-in and read back from it (each compile sets and checks it again);
        torch, used only to export, is limited too."""
        self.threads = n
        self._torch.set_threads(n)
        self.core.set_property("CPU", {"INFERENCE_NUM_THREADS": n})
        return {"inference_num_threads": self.core.get_property("CPU", "INFERENCE_NUM_THREADS"), "num_streams": 1}

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"openvino runs the float32 export at f32 or, by its inference precision hint, "
                                   f"bf16 here, not {precision}")
        self.precision = precision

    def config(self) -> dict[str, Any]:
        """The ``compile_model`` settings of the module docstring."""
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                                  "INFERENCE_PRECISION_HINT": HINTS[self.precision], "ENABLE_HYPER_THREADING": True}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        return config

    def check_compiled(self, compiled: ov.CompiledModel) -> dict[str, Any]:
        """The compiled model's settings, read back; a model OpenVINO did not compile for f32 or for
        the cell's thread count is refused, so no cell measures another computation or thread count."""
        got = {key: compiled.get_property(key) for key in RECORDED}
        hint = HINTS[self.precision]
        if got["INFERENCE_PRECISION_HINT"] != getattr(ov.Type, hint):
            raise UnsupportedError(f"OpenVINO compiled the model for {got['INFERENCE_PRECISION_HINT']} although "
                                   f"INFERENCE_PRECISION_HINT={hint} was asked (a CPU without native {hint} runs "
                                   f"f32); the {self.precision} gate and timings need {hint}")
        if self.threads and got["INFERENCE_NUM_THREADS"] != self.threads:
            raise UnsupportedError(f"OpenVINO compiled the model for {got['INFERENCE_NUM_THREADS']} threads where "
                                   f"the cell asks {self.threads} (INFERENCE_NUM_THREADS)")
        return {key: value.get_type_name() if isinstance(value, ov.Type) else value if isinstance(value, bool | int)
                else str(value) for key, value in got.items()}

    def build_compile_ns(self, model: OvModel) -> dict[str, float]:
        """Reading the ONNX graph, and compiling it for the shapes placed so far (``place`` compiles,
        and the compile scenario asks after placing its batch): ONNX Runtime's session creation
        does both at once."""
        steps = {"read_model": float(model.build_info["read_ns"])}
        if model.build_info["compile_ns"]:
            steps["compile_model"] = float(model.build_info["compile_ns"])
        return steps

    def build_info(self, model: Any) -> dict[str, Any]:
        return dict(model.build_info)

    def precision_info(self, model: OvModel) -> dict[str, str]:
        """Observed on the runtime graph of every model compiled so far (``place`` compiles one)."""
        if not model.compiled:
            raise RuntimeError("openvino: precision_info before any batch was placed (nothing compiled yet)")
        seen = [runtime_precisions(c) for c in model.compiled.values()]
        return {key: _one({s[key] for s in seen}) for key in ("param_dtype", "compute_dtype")}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> OvModel:
        variant = variant or "default"
        if variant not in self.variants:
            raise UnsupportedError(f"openvino has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"openvino's GPU plug-in drives Intel GPUs; dlbench runs it on the CPU only, "
                                   f"not {device!r}")
        module, bindings = forward_module(spec, weights)
        exported, graph, info = self.export_and_load(
            module, spec, weights, lambda e: self.core.read_model(e.onnx_bytes, ov.Tensor(np.empty(0, np.uint8))),
            "OpenVINO reads")
        read_s = info.pop("load_s")
        info.update({"device": "CPU", "config": {k: str(v) for k, v in self.config().items()},
                     "read_s": round(read_s, 3), "read_ns": int(read_s * 1e9), "compile_s": {}, "compile_ns": 0,
                     "model_cache": {}})
        self.exports.append({"model": spec.name, "options": dict(spec.options), **info})
        names = tuple(i.get_any_name() for i in graph.inputs)
        return OvModel(spec, graph, names, bindings, exported.params, info)

    def compiled(self, model: OvModel, shapes: dict[str, tuple[int, ...]]) -> ov.CompiledModel:
        """The graph compiled for these input shapes (once per shape), its settings checked."""
        key = tuple(sorted(shapes.items()))
        if key not in model.compiled:
            cache_dir = os.environ.get("DLBENCH_CACHE_DIR")
            if cache_dir:
                (Path(cache_dir) / "openvino").mkdir(parents=True, exist_ok=True)
                self.core.set_property({"CACHE_DIR": str(Path(cache_dir) / "openvino")})
            started = time.perf_counter_ns()
            compiled = self._compile(model, shapes, self.config())
            elapsed = time.perf_counter_ns() - started
            model.build_info["compile_s"][str(key)] = round(elapsed / 1e9, 3)
            model.build_info["compile_ns"] += elapsed
            model.build_info["model_cache"][str(key)] = (
                ("hit" if compiled.get_property("LOADED_FROM_CACHE") else "miss") if cache_dir else "off")
            model.build_info.update(self.check_compiled(compiled))
            model.compiled[key] = compiled
        return model.compiled[key]

    def _compile(self, model: OvModel, shapes: dict[str, tuple[int, ...]], config: dict[str, Any]) -> ov.CompiledModel:
        graph = model.graph.clone()
        graph.reshape({name: ov.PartialShape(list(shape)) for name, shape in shapes.items()})
        return self.core.compile_model(graph, "CPU", config)

    @staticmethod
    def _request(compiled: ov.CompiledModel, arrays: dict[str, np.ndarray]) -> ov.InferRequest:
        """An infer request whose input tensors share the arrays' memory."""
        request = compiled.create_infer_request()
        for name, array in arrays.items():
            request.set_tensor(name, ov.Tensor(array, shared_memory=True))
        return request

    def place(self, batch: Batch, model: OvModel) -> dict[str, Any]:
        arrays = {"x": np.ascontiguousarray(batch.x)}
        if "mask" in model.input_names:
            if batch.mask is None:
                raise ValueError(f"{model.spec.name} takes a mask and the batch has none")
            arrays["mask"] = np.ascontiguousarray(batch.mask, dtype=np.float32)
        arrays = {name: arrays[name] for name in model.input_names}
        compiled = self.compiled(model, {name: array.shape for name, array in arrays.items()})
        return {"arrays": arrays, "request": self._request(compiled, arrays)}

    # --- the measured closures ---------------------------------------------------------------
    def forward(self, model: OvModel, batch) -> Callable[[], Any]:
        return InferRun(model, batch)

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """OpenVINO's per-node performance counters (``PERF_COUNT``), which the CPU plug-in keeps only
        in a model compiled with them on: a second compiled model of the same graph, shapes and
        settings, on the same input arrays, so the timed one never runs with counters. One call
        first, left out (a request's first inference does one-time work); then the executed nodes
        of each call, laid end to end in the trace in their execution order, named
        ``node:type`` with the kernel (``exec_type``) and CPU time in their args."""
        if not isinstance(run, InferRun):
            raise UnsupportedError("openvino profiles its forward closure only")
        request = self._request(self._compile(run.model, {n: a.shape for n, a in run.arrays.items()},
                                              {**self.config(), "PERF_COUNT": True}), run.arrays)
        request.infer()
        events: list[dict[str, Any]] = []
        ts = 0.0
        for call in range(calls):
            request.infer()
            for node in request.profiling_info:
                if node.status != ov.ProfilingInfo.Status.EXECUTED:
                    continue
                dur = node.real_time.total_seconds() * 1e6
                events.append({"ph": "X", "pid": 0, "tid": 0, "name": f"{node.node_name}:{node.node_type}",
                               "ts": ts, "dur": dur, "args": {"exec_type": node.exec_type, "call": call,
                                                              "cpu_time_us": node.cpu_time.total_seconds() * 1e6}})
                ts += dur
        path = write_trace(events, outdir / "trace.json")
        return ProfileTrace(path, events,  # every event is an executed node, complete
                            f"OpenVINO PERF_COUNT (openvino {ov.__version__})")

    def sync(self, out: Any) -> None:
        """Nothing to wait for: a synchronous infer returns when its outputs are computed."""

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.array(out.data)

    # --- introspection for the equivalence gate ------------------------------------------

    def info(self) -> dict[str, Any]:
        capabilities = self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        return {"openvino": ov.__version__, "onnx": onnx.__version__, "torch": torch.__version__,
                "cpu": self.core.get_property("CPU", "FULL_DEVICE_NAME"), "cpu_capabilities": capabilities,
                "kernels": f"OpenVINO {ov.__version__} CPU plug-in (oneDNN-based), {'/'.join(capabilities)}",
                "inference_num_threads": self.threads or "OpenVINO default (one per physical core)",
                "settings": {k: str(v) for k, v in self.config().items()}, "exports": self.exports}


Backend_ = OpenVinoBackend
