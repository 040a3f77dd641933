"""llama.cpp through its Python bindings (``llama-cpp-python``): a GGUF file written from dlbench's
weights (:mod:`.convert`), loaded by ``llama_cpp.Llama``, its logits read back.

Fast-path settings, as llama.cpp's documentation and the bindings' defaults have them: the file is
memory-mapped (``use_mmap``), ``n_threads`` and ``n_threads_batch`` are the cores the process is pinned
to, the whole sequence is one ``llama_decode`` (``n_batch`` = ``n_ubatch`` = the sequence), flash
attention off (the bindings' default). The key/value cache is F32 at ``fp32`` (llama.cpp's default, F16,
would round every key and value), BF16 at ``bf16`` and llama.cpp's default F16 otherwise.

What is measured: ``forward`` is the logits of every position (``Llama(logits_all=True)``, ``eval`` then
``scores``). The high-level API serves one sequence at a time (its batch carries one sequence id), so a
batch of B sequences is B evaluations one after another, each from an empty cache: a batch's time is B
sequences' time, said in :meth:`Backend_.build_info`. No gradient: llama.cpp is an inference engine.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import llama_cpp
import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.llamacpp import DECLARATION, convert
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: precision -> what the model holds and computes in, as llama.cpp's CPU kernels do (the activations of a
#: matrix product are converted to the weights' ``vec_dot_type``: F16, BF16, or 8-bit blocks for Q8_0/Q4_0)
DTYPES = {"fp32": ("float32", "float32"), "fp16": ("float16", "float16"), "bf16": ("bfloat16", "bfloat16"),
          "q8_0": ("q8_0", "int8"), "q4_0": ("q4_0", "int8")}
#: ``general.file_type`` (llama.cpp's LLAMA_FTYPE) -> the precision whose file it is
FILE_TYPE_PRECISION = {int(v): k for k, v in convert.FILE_TYPES.items()}
#: the key/value cache's ggml type per precision (GGML_TYPE_F32, _F16, _BF16)
KV_TYPES = {"fp32": (0, "f32"), "bf16": (30, "bf16")}
DEFAULT_KV = (1, "f16")


def system_info() -> str:
    """llama.cpp's own account of its build: the CPU features it was compiled for (``llama_print_system_info``)."""
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip()


def build_facts() -> dict[str, Any]:
    """The runtime's build, recorded with every cell: the bindings' version, llama.cpp's system info (the
    CPU features the source build was compiled for) and, in dlbench's environment, the seconds that build
    took (the environment record's ``create_seconds``: the wheel is compiled from source there)."""
    from dlbench import envs

    record = envs.load("llamacpp")
    return {"llama_cpp_python": llama_cpp.__version__, "system_info": system_info(),
            "env_create_s": record.create_seconds if record else None}


#: block formats llama.cpp's AMX buffer type takes (ggml-cpu/amx/common.h ``qtype_has_amx_kernels``)
AMX_FORMATS = ("q8_0", "q4_0")
AMX_OFF = ("llama.cpp's AMX matrix product crashes (SIGSEGV in ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824, "
           "open; #16315: wrong results with Q4_0) on this machine's Q8_0 and Q4_0 models: its extra buffer types "
           "are off (use_extra_bufts=false), which also turns off the CPU repack of those weights")


def extra_buffer_types(precision: str) -> tuple[bool, str]:
    """Whether llama.cpp may place the weights in its extra buffer types (AMX tiles, the CPU repack), and why
    not: off for a block format where the build has AMX (``AMX_INT8 = 1`` in its system info)."""
    if precision in AMX_FORMATS and "AMX_INT8 = 1" in system_info():
        return False, AMX_OFF
    return True, ""


@contextmanager
def _model_params(use_extra_bufts: bool) -> Iterator[None]:
    """``Llama`` takes no ``use_extra_bufts``: while it is made, the default model parameters it starts from
    (``llama_model_default_params``, read once in ``Llama.__init__``) carry the setting."""
    module = llama_cpp.llama_cpp
    default = module.llama_model_default_params

    def params() -> Any:
        p = default()
        p.use_extra_bufts = use_extra_bufts
        return p

    module.llama_model_default_params = params
    try:
        yield
    finally:
        module.llama_model_default_params = default


def load(path: str, n_ctx: int, threads: int, precision: str, logits_all: bool) -> Any:
    """A ``Llama`` on the GGUF file, quiet, with this module's fast-path settings."""
    kv = KV_TYPES.get(precision, DEFAULT_KV)[0]
    with _model_params(extra_buffer_types(precision)[0]):
        return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
                               n_threads_batch=threads, logits_all=logits_all, type_k=kv, type_v=kv, use_mmap=True,
                               verbose=False)


def model_facts(llm: Any) -> dict[str, Any]:
    """What llama.cpp reports of a loaded model: its description, file type and parameter count."""
    meta = dict(llm.metadata)
    return {"desc": _desc(llm), "file_type": int(meta.get("general.file_type", -1)),
            "n_params": int(llama_cpp.llama_model_n_params(llm.model))}


def _desc(llm: Any) -> str:
    buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(llm.model, buf, 256)
    return buf.value.decode(errors="replace")


@dataclass
class LlamaCppModel:
    spec: ModelSpec
    llm: Any
    gguf: convert.Converted
    precision: str
    load_s: float
    facts: dict[str, Any]


def extra_info(precision: str) -> dict[str, Any]:
    allowed, why = extra_buffer_types(precision)
    return {"extra_buffer_types": allowed, **({"extra_buffer_types_off": why} if why else {})}


class Backend_(Backend):
    declaration = DECLARATION  # name, variants, devices, closures (forward only) and precisions
    packages = ("llama_cpp", "gguf")
    forward_only_reason = "forward only (llama.cpp is an inference engine): gradient and loss checks do not apply"

    def __init__(self) -> None:
        self.threads = len(os.sched_getaffinity(0))
        self.precision = "fp32"

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        return {"n_threads": n, "n_threads_batch": n}

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"llama.cpp runs GGUF files as {', '.join(self.precisions)} in dlbench, "
                                   f"not {precision}")
        self.precision = precision

    def hparams(self, spec: ModelSpec) -> dict[str, Any]:
        """The GGUF metadata written for ``spec`` (a test plants a wrong one here)."""
        return convert.hparams(spec)

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None
              ) -> LlamaCppModel:
        if device != "cpu":
            raise UnsupportedError("llama.cpp runs on the CPU only in dlbench (its wheel is built for this CPU)")
        if spec.input.kind != "tokens" or spec.input.variable_length:
            raise UnsupportedError(f"llama.cpp runs language models on token sequences; {spec.name} is not one")
        gguf = convert.converted(spec, weights, self.precision, self.hparams(spec), llama_cpp.__version__)
        started = time.perf_counter()
        llm = load(str(gguf.path), spec.input.shape[0], self.threads, self.precision, logits_all=True)
        load_s = time.perf_counter() - started
        return LlamaCppModel(spec, llm, gguf, self.precision, load_s, model_facts(llm))

    def place(self, batch: Batch, model: LlamaCppModel) -> list[list[int]]:
        if batch.mask is not None:
            raise UnsupportedError("llama.cpp's Llama.eval takes whole sequences: no padding mask in dlbench")
        return [[int(t) for t in row] for row in np.asarray(batch.x)]

    def forward(self, model: LlamaCppModel, batch: list[list[int]]) -> Callable[[], np.ndarray]:
        llm = model.llm

        def run() -> np.ndarray:
            out = []
            for row in batch:  # one sequence at a time: the high-level API serves one
                llm.reset()
                llm.eval(row)
                out.append(np.array(llm.scores[:len(row)], np.float32))
            return np.stack(out)

        return run

    def gradient(self, model: LlamaCppModel, batch: Any) -> Callable[[], Any]:
        raise UnsupportedError("llama.cpp is an inference engine: no gradient")

    def train_step(self, model: LlamaCppModel, batch: Any, opt: OptimizerSpec) -> Callable[[], Any]:
        raise UnsupportedError("llama.cpp is an inference engine: no training step")

    def loss_and_grads(self, model: LlamaCppModel, batch: Any) -> tuple[float, dict[str, np.ndarray]]:
        raise UnsupportedError("llama.cpp is an inference engine: no gradient")

    def sync(self, out: Any) -> None:
        pass  # eval returns when llama_decode has finished

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out)

    def param_count(self, model: LlamaCppModel) -> int:
        return model.facts["n_params"]

    def get_params(self, model: LlamaCppModel) -> dict[str, np.ndarray]:
        """The GGUF file's tensors by their llama.cpp names (dequantized; not the canonical layout: the
        gate's forward-only path never reads them back)."""
        return convert.read(model.gguf.path)[1]

    def precision_info(self, model: LlamaCppModel) -> dict[str, str]:
        held = FILE_TYPE_PRECISION.get(model.facts["file_type"])
        if held is None:
            return {"param_dtype": f"file type {model.facts['file_type']}", "compute_dtype": "unknown"}
        return dict(zip(("param_dtype", "compute_dtype"), DTYPES[held], strict=True))

    def build_info(self, model: LlamaCppModel) -> dict[str, Any]:
        return {**model.gguf.info(), "load_s": round(model.load_s, 4), "format": convert.FORMATS[model.precision].name,
                "model": model.facts["desc"], "kv_cache": KV_TYPES.get(model.precision, DEFAULT_KV)[1],
                "batch": "sequences evaluated one after another (Llama serves one sequence)",
                **extra_info(model.precision)}

    def info(self) -> dict[str, Any]:
        return {**build_facts(), "threads": self.threads}
