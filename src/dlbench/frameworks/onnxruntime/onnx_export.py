"""The torch -> ONNX export shared by the engines that run dlbench's models from ONNX (ONNX Runtime,
OpenVINO): both run the same exported graph, so a difference between them is the engine's alone.

The network is built by dlbench's torch backend; its eval-mode forward is exported by torch's
default exporter (``dynamo=True``: torch.export + onnxscript, ``optimize=False`` so every
parameter is still a named initializer, then ``ONNXProgram.optimize()``), or the TorchScript
exporter (``dynamo=False``, no constant folding) as the fallback. The batch axis is dynamic, and
for ``variable_length`` token inputs the sequence axis too, with the mask as the graph's second
input ``mask`` (float32, batch x steps). See :mod:`dlbench.frameworks.onnxruntime.backend` for the rules.

torch.export keeps state between exports in one process: after a first LSTM model's export, the
next one's sequence axis comes back fixed (a decomposition guards it to the example's length), so
the gate, which builds several models in one process, got a graph that refused shorter batches.
An export whose dynamic axes came back fixed is made again in a fresh Python process (as the timed
cells' exports are: one per process), so the gate checks the graph the timed cells run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnx
import torch

from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.torch import backend as torch_backend
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

EXPORTERS = ("dynamo", "torchscript")
EXAMPLE_BATCH = 2

class ForwardOnly(torch.nn.Module):
    """The torch network's inference output alone (its Seq also returns an autoencoder target)."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x, mask)[0]


@dataclass
class Exported:
    """One exported graph: serialised, its parameter initializers by torch name, and how it was made."""

    onnx_bytes: bytes
    params: dict[str, np.ndarray]
    exporter: str
    opset: int


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """The exporters warn about optional packages (torchvision) and deprecations on every call."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _example_inputs(spec: ModelSpec) -> tuple[tuple[torch.Tensor, ...], list[str]]:
    """Zero inputs of the spec's full shape (only shapes and dtypes matter to the export)."""
    shape = (EXAMPLE_BATCH, *spec.input.shape)
    x = torch.zeros(shape, dtype=torch.int64 if spec.input.kind == "tokens" else torch.float32)
    if spec.input.variable_length:
        return (x, torch.ones(shape, dtype=torch.float32)), ["x", "mask"]
    return (x,), ["x"]


def export_dynamo(module: torch.nn.Module, spec: ModelSpec) -> Exported:
    args, names = _example_inputs(spec)
    batch = torch.export.Dim("batch")
    if spec.input.variable_length:
        steps = torch.export.Dim("steps")
        shapes = {"x": {0: batch, 1: steps}, "mask": {0: batch, 1: steps}}
    else:
        shapes = {"x": {0: batch}}
    with quiet_export():
        program = torch.onnx.export(module, args, dynamo=True, input_names=names, output_names=["output"],
                                    dynamic_shapes=shapes, optimize=False, verbose=False)
    wanted = {name for name, _ in module.named_parameters()}
    inits = program.model.graph.initializers
    params = {name: inits[name].const_value.numpy() for name in wanted if name in inits}
    opset = program.model.opset_imports.get("", 0)
    fixed = [f"{v.name}[{axis}] = {v.shape[axis]}" for v in program.model.graph.inputs
             for axis in shapes.get(v.name, {}) if isinstance(v.shape[axis], int)]
    if fixed:
        raise FixedAxes(f"the dynamo export fixed the dynamic axes {', '.join(fixed)}")
    with quiet_export():
        program.optimize()
    return Exported(program.model_proto.SerializeToString(), params, "dynamo", int(opset))


class FixedAxes(RuntimeError):
    """A dynamo export came back with dynamic axes fixed (see the module docstring)."""


def export_dynamo_fresh(spec: ModelSpec, weights: Weights) -> Exported:
    """``export_dynamo`` of the spec's module in a fresh Python process."""
    with tempfile.TemporaryDirectory(prefix="dlbench-export-") as tmp:
        job, out = Path(tmp) / "job.pkl", Path(tmp) / "exported.pkl"
        job.write_bytes(pickle.dumps((spec, weights)))
        code = (f"from dlbench.frameworks.onnxruntime.onnx_export import _fresh_child; "
                f"_fresh_child({str(job)!r}, {str(out)!r})")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            raise RuntimeError(f"the export in a fresh process failed: {lines[-1] if lines else done.returncode}")
        return pickle.loads(out.read_bytes())


def _export(exporter: str, module: torch.nn.Module, spec: ModelSpec, weights: Weights) -> Exported:
    try:
        return EXPORT_FUNCTIONS[exporter](module, spec)
    except FixedAxes:
        return export_dynamo_fresh(spec, weights)


def export_torchscript(module: torch.nn.Module, spec: ModelSpec) -> Exported:
    args, names = _example_inputs(spec)
    axes: dict[str, dict[int, str]] = {"x": {0: "batch"}, "output": {0: "batch"}}
    if spec.input.variable_length:
        axes.update(x={0: "batch", 1: "steps"}, mask={0: "batch", 1: "steps"})
    buf = io.BytesIO()
    with quiet_export():
        torch.onnx.export(module, args, buf, dynamo=False, input_names=names, output_names=["output"],
                          dynamic_axes=axes, do_constant_folding=False)
    proto = onnx.load_from_string(buf.getvalue())
    wanted = {name for name, _ in module.named_parameters()}
    params = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer if i.name in wanted}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    return Exported(buf.getvalue(), params, "torchscript", int(opset))


EXPORT_FUNCTIONS = {"dynamo": export_dynamo, "torchscript": export_torchscript}


def export_cached(exporter: str, module, spec: ModelSpec, weights: Weights) -> tuple[Exported, str]:
    """``EXPORT_FUNCTIONS[exporter]``, reusing an earlier export of the same graph and weights when
    ``DLBENCH_EXPORT_CACHE`` names a directory (the runner sets one per run for timed cells, so an
    export, ~15 s here, is paid once per model and not once per cell; the compile scenario and
    verification export afresh). Returns the export and "hit", "miss" or "off"."""
    cache_dir = os.environ.get("DLBENCH_EXPORT_CACHE")
    if not cache_dir:
        return _export(exporter, module, spec, weights), "off"
    key = hashlib.sha256(repr((spec, exporter, torch.__version__, onnx.__version__)).encode())
    for group in (weights.params, weights.state):
        for name in sorted(group):
            key.update(name.encode())
            key.update(np.ascontiguousarray(group[name]).tobytes())
    path = Path(cache_dir) / f"{key.hexdigest()[:32]}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes()), "hit"
    exported = _export(exporter, module, spec, weights)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(exported))
    os.replace(partial, path)  # atomic: a concurrent process reads a whole file or none
    return exported, "miss"


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def forward_module(spec: ModelSpec, weights: Weights) -> tuple[ForwardOnly, dict[str, tuple[str, Callable]]]:
    """The torch network to export (eval mode, on the CPU) and, per canonical parameter name, its
    torch parameter name and the conversion from torch layout to canonical."""
    torch_model = torch_backend.TorchBackend().build(spec, weights, "cpu", "eager")
    module = ForwardOnly(torch_model.net).eval()
    names = {id(p): name for name, p in module.named_parameters()}
    return module, {canon: (names[id(t)], from_torch) for canon, (t, _, from_torch) in torch_model.bindings.items()}


def lstm_extra(spec: ModelSpec) -> tuple[int, str]:
    """torch's LSTM brings a second bias per gate (``bias_hh``, held at zero): 4 x units per LSTM."""
    extra = sum(4 * layer.units for layer in L.walk(spec.layers) if isinstance(layer, L.LSTM))
    return extra, ("exported from torch's nn.LSTM, which has a second bias per gate (bias_hh, held at zero)"
                   if extra else "")


def read_params(bindings: dict[str, tuple[str, Callable]], params: dict[str, np.ndarray],
                exporter: str) -> dict[str, np.ndarray]:
    """Canonical parameters read back from the exported graph's initializers."""
    missing = [canon for canon, (name, _) in bindings.items() if name not in params]
    if missing:
        raise UnsupportedError(f"the {exporter} exporter folded parameters into other "
                               f"constants, so they cannot be read back: {', '.join(missing[:5])}")
    return {canon: np.array(from_torch(params[name])) for canon, (name, from_torch) in bindings.items()}


T = TypeVar("T")


class ExportEngine(Backend):
    """What every engine running the export shares: inference only, and the gate reads its parameters
    from the export's initializers (its model holds ``params``, ``bindings`` and ``build_info``)."""

    closures: tuple[str, ...] = ("forward",)
    #: why training is not measured, with ``{what}`` for the closure refused
    not_trainable: str = "{what} is not measured: the exported ONNX graph is the eval-mode forward only"
    #: exporters tried in order (tests force the fallback by overriding this)
    exporters: tuple[str, ...] = EXPORTERS

    def export_and_load(self, module: torch.nn.Module, spec: ModelSpec, weights: Weights,
                        load: Callable[[Exported], T], engine: str) -> tuple[Exported, T, dict[str, Any]]:
        """The first exporter's graph that ``load`` (the engine's reading or session creation) accepts;
        the export's facts for ``build_info``: exporter, opset, the fallback's reasons, times."""
        fallback: list[str] = []
        for exporter in self.exporters:
            try:
                started = time.perf_counter()
                exported, export_cache = export_cached(exporter, module, spec, weights)
                export_s = time.perf_counter() - started
                started = time.perf_counter()
                loaded = load(exported)
                load_s = time.perf_counter() - started
                break
            except UnsupportedError:
                raise
            except Exception as exc:
                fallback.append(f"{exporter}: {short_error(exc)}")
        else:
            raise UnsupportedError(f"no torch.onnx exporter produced a graph {engine} for {spec.name}: "
                                   + "; ".join(fallback))
        return exported, loaded, {
            "exporter": exported.exporter, "opset": exported.opset, "exporter_fallback": "; ".join(fallback) or None,
            "onnx_bytes": len(exported.onnx_bytes), "export_s": round(export_s, 3), "export_cache": export_cache,
            "load_s": load_s}

    def gradient(self, model: Any, batch: Any) -> Callable[[], Any]:
        raise UnsupportedError(self.not_trainable.format(what="the gradient scenario"))

    def train_step(self, model: Any, batch: Any, opt: OptimizerSpec) -> Callable[[], Any]:
        raise UnsupportedError(self.not_trainable.format(what="the train_step scenario"))

    def loss_and_grads(self, model: Any, batch: Any) -> tuple[float, dict[str, np.ndarray]]:
        raise UnsupportedError(self.not_trainable.format(what="the loss and its gradients"))

    def param_count(self, model: Any) -> int:
        return sum(int(a.size) for a in model.params.values())

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        return lstm_extra(spec)

    def get_params(self, model: Any) -> dict[str, np.ndarray]:
        return read_params(model.bindings, model.params, model.build_info["exporter"])


def _fresh_child(job: str, out: str) -> None:
    """``export_dynamo_fresh``'s child process."""
    spec, weights = pickle.loads(Path(job).read_bytes())
    module, _ = forward_module(spec, weights)
    Path(out).write_bytes(pickle.dumps(export_dynamo(module, spec)))
