"""ONNX Runtime backend: the deployment view, inference only.

The network is built by dlbench's torch backend (ONNX Runtime has no model-building API of its
own; the usual path to it is an export from a training framework), its eval-mode forward is
exported to ONNX in memory, and an ``InferenceSession`` runs it.

Export:

* torch's default exporter first, ``torch.onnx.export(..., dynamo=True)`` (torch.export +
  onnxscript), exported with ``optimize=False`` so every parameter is still a named initializer,
  then ``ONNXProgram.optimize()`` (the exporter's default constant folding) before the session;
  the TorchScript exporter (``dynamo=False``, no constant folding) only if that export or its
  session fails for the model, with the reason recorded. The exporter and opset used are in
  ``info()["exports"]`` and in the model's ``build_info`` (the gate copies it to ``VerifyResult.build``).
* variants: ``default`` (the export as it is) and ``fused`` (transformers only: ONNX Runtime's
  transformer optimizer applied to the export first, its fusions (and those kept off because they
  change the function) recorded in ``build_info["fusions"]``;
  :mod:`dlbench.frameworks.onnxruntime.ort_fusion`).
* dynamic axes: batch always; for ``variable_length`` token inputs also the sequence axis, and the
  mask is the graph's second input ``mask`` (float32, batch x steps).

Fast path and fairness settings:

* ``SessionOptions``: ``intra_op_num_threads`` = the ``set_threads`` count (ORT's default, one per
  physical core, when never set), ``inter_op_num_threads = 1`` with sequential execution,
  ``graph_optimization_level = ORT_ENABLE_ALL`` (constant folding, BN folded into conv, fusions,
  NCHWc layout on x86); the thread pool's default spin-waiting is kept.
* inputs are wrapped as ``OrtValue`` and bound once with ``io_binding`` in ``place``; the output is
  bound to the device and allocated by ORT per run; the timed closure is ``run_with_iobinding``.
  On the CPU a ``run`` returns when the output is computed, so ``sync`` has nothing to wait for.
* CUDA: ``CUDAExecutionProvider`` (with the CPU provider as fallback for unassigned nodes) when
  the installed build has it (``onnxruntime-gpu``); written the standard way but untested here
  (no GPU): ORT synchronises the stream at the end of a run, so ``sync`` is a no-op there too.
* compile: ONNX Runtime's compile step is the session creation (graph optimisation, kernel
  selection, weight pre-packing), timed apart from the torch export in ``build_info``
  (``session_s`` vs ``export_s``). If ``DLBENCH_CACHE_DIR`` is set, the optimised graph is saved
  there (``optimized_model_filepath``) under a hash of the exported graph (weights included), the
  ORT version and the providers; a later process loads it with optimisation off, so its
  'compile' is load + kernel creation + pre-packing only. The export runs in both processes (the
  cache key is its output). The saved graph may hold machine-specific kernels (NCHWc), so the
  cache is only valid on the machine that wrote it, which is how ``DLBENCH_CACHE_DIR`` is used.

Gate rules:

* ``param_count``: elements of the exported (unoptimised) graph's initializers whose names are
  torch parameter names of the exported module; BN running statistics (buffers) and exporter
  constants are not parameters. Counted before ORT's optimiser, which folds BN into the conv.
  torch's LSTM brings its second bias (``bias_hh``, held at zero): 4 x units extra per LSTM,
  reported as ``param_count_extra``, as for torch.
* ``get_params``: read back from those initializers (the values the session was created from),
  converted to canonical layout; inference never changes them.
* ``gradient``, ``train_step`` and ``loss_and_grads`` raise :class:`UnsupportedError`: the backend
  declares the ``forward`` closure only and the gate checks parameters and forward only.

Precision ``int8``: ONNX Runtime's own post-training dynamic quantization
(``onnxruntime.quantization.quantize_dynamic``, its defaults: int8 weights per tensor, uint8
activations quantized per call; MatMul/Gemm, Conv, LSTM and Gather nodes become their integer forms)
of the exported float graph, before the session is made. On a CPU without VNNI (AVX2, AVX-512
without VNNI) the weights are quantized to 7 bits (``reduce_range=True``), as ONNX Runtime's
quantization guide says for that case: the u8 x s8 multiply-add those CPUs have saturates its 16-bit
sums with 8-bit weights. Recorded in ``build_info["int8"]``. Parameters are still read from the float
export (what was quantized); ``precision_info`` counts the quantized graph's initializers by type,
and observes the compute type in the graph ONNX Runtime optimises and runs (a session's
``optimized_model_filepath``): int8 where its multiplying operators that read a weight are all integer
kernels (``ConvInteger``, ``DynamicQuantizeMatMul``, ...), mixed where a float one (``Conv``, ``Gemm``,
``LSTM``, ...) is left; attention's products of two activations stay float32, as in torch, and are not
counted (:func:`weight_ops`). A model whose quantized graph keeps a float one (lstm-imdb: ONNX Runtime keeps its LSTM
in float32) is ``unsupported`` at int8, with the operators named: int8 would not be what runs.
Other precisions are not offered: the exported graph is float32, and ORT's CPU provider has no
bfloat16 kernels for most operators.

Profile (``--profile``): ONNX Runtime's profiler is a session option (``enable_profiling``), fixed
when a session is made, so the timed session never has it on. ``profile`` makes a second session of
the same graph, options and providers with profiling on, binds the same input values, runs one call
to warm it and then the profiled calls, and keeps ORT's own JSON (a Chrome trace event list). Its
operations are the ``Node`` events' kernel times, named ``node:OpType`` as TensorFlow's are
(``fused node_Gemm_10:FusedGemm``), of the profiled calls, the warm-up call's left out.
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import NATIVE, cpu_flags
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.onnxruntime import DECLARATION, ort_fusion
from dlbench.frameworks.onnxruntime.onnx_export import (  # noqa: F401 (re-exported: the tests and the survey use them here)
    EXPORT_FUNCTIONS,
    EXPORTERS,
    Exported,
    ExportEngine,
    ForwardOnly,
    export_cached,
    export_dynamo,
    export_torchscript,
    forward_module,
    short_error,
)
from dlbench.frameworks.torch import backend as torch_backend
from dlbench.measure.profile import ProfileTrace, complete_events, read_trace
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


@dataclass
class OrtModel:
    spec: ModelSpec
    session: ort.InferenceSession
    input_names: tuple[str, ...]
    output_name: str
    device: str
    #: canonical name -> (torch parameter name, torch layout -> canonical)
    bindings: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]]
    #: parameter initializers of the exported graph, by torch parameter name
    params: dict[str, np.ndarray]
    #: exporter, opset, providers, session options, timings of export and session creation
    build_info: dict[str, Any]
    #: initializer elements of the graph the session runs, by element type (``precision_info``)
    elements: dict[str, int]
    #: the graph the session was made from (``profile`` makes a second session of it)
    graph: bytes


#: operators of an optimised graph that multiply in floating point, and the integer kernels that replace them
FLOAT_COMPUTE = frozenset({"MatMul", "Gemm", "FusedGemm", "FusedMatMul", "Conv", "FusedConv", "ConvTranspose", "LSTM",
                           "GRU", "RNN", "Attention", "MultiHeadAttention"})
INT_COMPUTE = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                         "QLinearMatMul", "QLinearConv", "DynamicQuantizeLSTM", "QGemm", "QAttention"})


def weight_ops(graph: onnx.GraphProto) -> Counter:
    """The operator types of the nodes that read a weight (an initializer, or a ``Constant``'s output).
    Attention's score and value products multiply two activations: dynamic quantization, ONNX
    Runtime's as torch's, quantizes layers with weights, so those stay float32 in every framework and
    say nothing about whether int8 is what the layers run."""
    weights = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    return Counter(n.op_type for n in graph.node if any(i in weights for i in n.input))


def compute_dtype(ops) -> str:
    """int8 where every multiplying operator is an integer kernel, float32 where none is, else mixed."""
    floats, ints = any(op in FLOAT_COMPUTE for op in ops), any(op in INT_COMPUTE for op in ops)
    if floats and ints:
        return "mixed:float32,int8"
    return "int8" if ints else "float32" if floats else "none"


class SessionRun:
    """The timed closure: one ``run_with_iobinding`` of the model's session over the placed inputs.
    A class, not a closure, so ``profile`` can replay the same graph and inputs in a profiling session."""

    def __init__(self, model: OrtModel, placed: dict[str, Any]) -> None:
        self.model, self.placed = model, placed
        self._session, self._binding = model.session, placed["binding"]

    def __call__(self) -> Any:
        self._session.run_with_iobinding(self._binding)
        return self._binding.get_outputs()[0]


class OnnxRuntimeBackend(ExportEngine):
    declaration = DECLARATION
    not_trainable = ("onnxruntime is an inference engine here: the exported ONNX graph is the eval-mode forward only "
                     "(no loss, no backward; ONNX Runtime's training API is a separate package), so {what} is not measured")
    packages = ("onnxruntime", "onnx", "onnxscript", "torch")

    def __init__(self) -> None:
        self.threads: int | None = None
        self.precision = DEFAULT_PRECISION
        self.exports: list[dict[str, Any]] = []
        self._torch = torch_backend.TorchBackend()

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"onnxruntime runs the float32 export or its int8 dynamic quantization here, "
                                   f"not {precision}")
        self.precision = precision

    def graph(self, onnx_bytes: bytes) -> bytes:
        """The graph the session runs: the export, or its int8 dynamic quantization."""
        if self.precision != "int8":
            return onnx_bytes
        with tempfile.TemporaryDirectory(prefix="dlbench-int8-") as tmp:
            out = Path(tmp) / "int8.onnx"
            quantize_dynamic(onnx.load_from_string(onnx_bytes), out, weight_type=QuantType.QInt8,
                             reduce_range=self.reduce_range())
            return out.read_bytes()

    def reduce_range(self) -> bool:
        """7-bit weights where the CPU has no VNNI (ONNX Runtime's advice against u8s8 saturation)."""
        return not any(f in cpu_flags() for f in NATIVE["int8"])

    def precision_info(self, model: OrtModel) -> dict[str, str]:
        """``param_dtype``: the element type holding most of the running graph's initializer elements
        (the parameters' storage); ``compute_dtype``: observed over every multiplying operator of the
        graph ONNX Runtime optimises (:func:`compute_dtype`)."""
        kind = max(model.elements, key=model.elements.__getitem__)
        return {"param_dtype": kind, "compute_dtype": compute_dtype(self.optimised_ops(model.graph, model.device))}

    def optimised_ops(self, graph: bytes, device: str) -> Counter:
        """The operator types of ``graph`` as ONNX Runtime optimises it for this session's settings, of
        the nodes that read a weight (:func:`weight_ops`)."""
        so = self.session_options()
        so.log_severity_level = 3  # not its notice that an optimised graph written out is hardware specific
        with tempfile.TemporaryDirectory(prefix="dlbench-ort-graph-") as tmp:
            so.optimized_model_filepath = str(Path(tmp) / "optimised.onnx")
            ort.InferenceSession(graph, so, providers=self.providers(device))
            return weight_ops(onnx.load(so.optimized_model_filepath).graph)

    # --- set-up -----------------------------------------------------------------------
    def set_threads(self, n: int) -> dict[str, Any]:
        """Stored for the sessions ``build`` creates; torch (used only to export) is limited too."""
        self.threads = n
        self._torch.set_threads(n)
        return {"intra_op": n, "inter_op": 1}

    def session_options(self) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads or 0
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return so

    def providers(self, device: str) -> list:
        if device == "cpu":
            return ["CPUExecutionProvider"]
        if device.startswith("cuda"):
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UnsupportedError("this onnxruntime build has no CUDAExecutionProvider (pip install onnxruntime-gpu)")
            index = int(device.partition(":")[2] or 0)
            return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
        raise UnsupportedError(f"onnxruntime backend has no device {device!r}")

    def build_compile_ns(self, model: OrtModel) -> dict[str, float]:
        return {"session": float(model.build_info["session_ns"])}

    def build_info(self, model: Any) -> dict[str, Any]:
        return dict(model.build_info)

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> OrtModel:
        variant = variant or "default"
        if variant not in self.variants:
            raise UnsupportedError(f"onnxruntime has no variant {variant!r}")
        providers = self.providers(device)
        module, bindings = forward_module(spec, weights)

        fusions: dict[str, Any] = {}
        if variant == "fused":
            ort_fusion.model_type(spec)  # a model without attention is unsupported before any export

        def load(exported: Exported) -> tuple[bytes, ort.InferenceSession, str]:
            graph = exported.onnx_bytes
            if variant == "fused":
                graph, found = ort_fusion.fuse(graph, spec)
                fusions.update(found)
            graph = self.graph(graph)
            return (graph, *self._session(graph, providers))
        exported, (graph, session, cache), info = self.export_and_load(module, spec, weights, load,
                                                                      "ONNX Runtime runs")
        if fusions:
            info["fusions"] = fusions
        session_s = info.pop("load_s")
        info.update({**self.runtime_info(session), "session_cache": cache, "session_s": round(session_s, 3),
                     "session_ns": int(session_s * 1e9)})
        if self.precision == "int8":
            ops = self.optimised_ops(graph, device)
            left = sorted(op for op in ops if op in FLOAT_COMPUTE)
            if left:
                raise UnsupportedError(f"ONNX Runtime's dynamic quantization leaves {', '.join(left)} of {spec.name} "
                                       "computing in float32: int8 would not be what runs")
            info["int8"] = {"quantizer": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8",
                            "reduce_range": self.reduce_range(),
                            "integer_ops": sorted(op for op in ops if op in INT_COMPUTE)}
        self.exports.append({"model": spec.name, "options": dict(spec.options), **info})
        return self.model(spec, session, device, bindings, exported, info, graph)

    def runtime_info(self, session: ort.InferenceSession) -> dict[str, Any]:
        """The session's settings, as built (recorded in ``build_info``)."""
        so = session.get_session_options()
        return {"providers": session.get_providers(), "intra_op_threads": so.intra_op_num_threads,
                "inter_op_threads": so.inter_op_num_threads, "graph_optimization_level": "ORT_ENABLE_ALL"}

    def model(self, spec: ModelSpec, session: ort.InferenceSession, device: str, bindings: dict, exported: Exported,
              info: dict[str, Any], graph: bytes) -> OrtModel:
        inputs = tuple(i.name for i in session.get_inputs())
        return OrtModel(spec, session, inputs, session.get_outputs()[0].name, device, bindings, exported.params, info,
                        _elements(graph), graph)

    def _session(self, onnx_bytes: bytes, providers: list) -> tuple[ort.InferenceSession, str]:
        """The session, and whether the optimised graph came from the cache ("hit"), went to it
        ("miss") or no cache is set ("off")."""
        so = self.session_options()
        cache_dir = os.environ.get("DLBENCH_CACHE_DIR")
        if not cache_dir:
            return ort.InferenceSession(onnx_bytes, so, providers=providers), "off"
        key = hashlib.sha256(onnx_bytes)
        key.update(repr((ort.__version__, providers, platform.machine(), "ORT_ENABLE_ALL")).encode())
        path = Path(cache_dir) / "onnxruntime" / f"{key.hexdigest()[:32]}.onnx"
        if path.exists():
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            return ort.InferenceSession(str(path), so, providers=providers), "hit"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.onnx")
        so.optimized_model_filepath = str(partial)
        try:
            session = ort.InferenceSession(onnx_bytes, so, providers=providers)
            os.replace(partial, path)  # atomic: a concurrent process reads a whole file or none
        finally:
            partial.unlink(missing_ok=True)
        return session, "miss"

    def place(self, batch: Batch, model: OrtModel) -> dict[str, Any]:
        """Inputs as OrtValues on the session's device, bound once; the arrays are kept alive
        because a CPU OrtValue shares their memory."""
        arrays = {"x": np.ascontiguousarray(batch.x)}
        if "mask" in model.input_names:
            if batch.mask is None:
                raise ValueError(f"{model.spec.name} takes a mask and the batch has none")
            arrays["mask"] = np.ascontiguousarray(batch.mask, dtype=np.float32)
        device_type, _, index = model.device.partition(":")
        device_id = int(index or 0)
        values = {k: ort.OrtValue.ortvalue_from_numpy(a, device_type, device_id) for k, a in arrays.items()}
        return {"arrays": arrays, "values": values, "binding": _bind(model, model.session, values)}

    # --- the measured closures ---------------------------------------------------------------
    def forward(self, model: OrtModel, batch) -> Callable[[], Any]:
        return SessionRun(model, batch)

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """ORT's profiler in a second session of the same graph (see the module docstring)."""
        if not isinstance(run, SessionRun):
            raise UnsupportedError("onnxruntime profiles its own forward closure only")
        model = run.model
        so = self.session_options()
        so.enable_profiling = True
        so.profile_file_prefix = str(outdir / "onnxruntime")
        session = ort.InferenceSession(model.graph, so, providers=self.providers(model.device))
        binding = _bind(model, session, run.placed["values"])
        for _ in range(calls + 1):
            session.run_with_iobinding(binding)
        path = Path(session.end_profiling())
        events = read_trace(path)
        runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                      key=lambda e: float(e["ts"]))
        warm_end = float(runs[0]["ts"]) + float(runs[0]["dur"]) if runs else float("-inf")
        ops = [{**e, "name": _op_name(e)} for e in complete_events(
            events, lambda e: e.get("cat") == "Node" and e["name"].endswith("_kernel_time")) if float(e["ts"]) >= warm_end]
        return ProfileTrace(path, ops, f"onnxruntime profiler (onnxruntime {ort.__version__})")



    def sync(self, out: Any) -> None:
        """Nothing to wait for: a run returns when its outputs are computed (CUDA: ORT syncs its stream)."""

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out.numpy())

    # --- introspection for the equivalence gate ------------------------------------------




    def info(self) -> dict[str, Any]:
        return {
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "onnxscript": _version("onnxscript"),
            "torch": torch.__version__,
            "ort_device": ort.get_device(),
            "kernels": f"MLAS (ONNX Runtime {ort.__version__} CPUExecutionProvider)",
            "available_providers": ort.get_available_providers(),
            "intra_op_threads": self.threads or "ORT default (one per physical core)",
            "inter_op_threads": 1,
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "exports": self.exports,
        }


def _op_name(event: dict[str, Any]) -> str:
    """A node's kernel event as ``node:OpType`` (``fused node_Gemm_10:FusedGemm``), TensorFlow's form."""
    node = event["name"].removesuffix("_kernel_time")
    op_type = event.get("args", {}).get("op_name")
    return f"{node}:{op_type}" if op_type else node


def _bind(model: OrtModel, session: ort.InferenceSession, values: dict[str, Any]) -> Any:
    """An io_binding of ``session`` over the placed input values, its output on the model's device."""
    device_type, _, index = model.device.partition(":")
    binding = session.io_binding()
    for name in model.input_names:
        binding.bind_ortvalue_input(name, values[name])
    binding.bind_output(model.output_name, device_type, int(index or 0))
    return binding


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except (ImportError, AttributeError):
        return None


Backend_ = OnnxRuntimeBackend


def _elements(onnx_bytes: bytes) -> dict[str, int]:
    """Initializer elements of a graph by numpy element type (uint8 counted as int8)."""
    out: dict[str, int] = {}
    for init in onnx.load_from_string(onnx_bytes).graph.initializer:
        kind = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).name
        kind = "int8" if kind == "uint8" else kind  # 8-bit integers either way (Gather's weights are uint8)
        out[kind] = out.get(kind, 0) + int(np.prod(init.dims))
    return out
