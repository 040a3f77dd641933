"""Numeric precisions: what each name means, defined once for every backend and the gate.

A precision says which type the parameters are stored in and which type the compute runs in:

* ``fp32``: both float32 (every result before precision became an axis);
* ``bf16`` / ``fp16``: parameters and compute in that type (a cast model);
* ``amp-bf16`` / ``amp-fp16``: float32 master parameters, compute in the low type through the
  framework's own mixed-precision API (fp16 training with loss scaling);
* ``int8``: post-training dynamic quantization (int8 weights, activations quantized per call),
  inference only;
* ``q8_0`` / ``q4_0``: llama.cpp's block formats (GGUF): weights in blocks of 32 along a row, 8 or 4
  bits each with one float16 scale per block; its CPU kernels quantize the activations to 8-bit blocks
  of the same shape per call. Inference only;
* ``int4``: weight-only 4-bit quantization with block-wise scales (a runtime's own format, such as ONNX
  Runtime GenAI's MatMulNBits), activations quantized to int8 in the products, inference only;
* ``tf32``: float32 storage, TensorFloat-32 matmuls on an Ampere-or-later GPU (not on a CPU).

A backend declares the precisions it can run in ``Backend.precisions``, is told the cell's one in
``Backend.set_precision`` before it builds, and reports what the framework really holds in
``Backend.precision_info``; the gate compares that report with :func:`expected_dtypes`, so a backend
that silently runs float32 when asked for bf16 fails the gate rather than timing the wrong thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlbench.core.errors import UsageError


@dataclass(frozen=True)
class Precision:
    name: str
    #: the parameters' storage type, as numpy names it ("int8" for quantized weights)
    param_dtype: str
    #: the type the layers compute in
    compute_dtype: str
    #: forward only (int8: post-training quantization has no training path)
    inference_only: bool = False
    #: runs only on an accelerator (tf32)
    accelerator_only: bool = False
    summary: str = ""


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "float32", "float32", summary="float32 parameters and compute"),
    Precision("bf16", "bfloat16", "bfloat16", summary="bfloat16 parameters and compute"),
    Precision("fp16", "float16", "float16", summary="float16 parameters and compute"),
    Precision("amp-bf16", "float32", "bfloat16",
              summary="float32 master parameters, bfloat16 compute (the framework's mixed-precision API)"),
    Precision("amp-fp16", "float32", "float16",
              summary="float32 master parameters, float16 compute, loss scaling for training"),
    Precision("int8", "int8", "int8", inference_only=True,
              summary="post-training dynamic quantization: int8 weights, activations quantized per call"),
    Precision("q8_0", "q8_0", "int8", inference_only=True,
              summary="llama.cpp's Q8_0: weights in blocks of 32 int8 with a float16 scale, activations quantized "
                      "to the same blocks per call"),
    Precision("q4_0", "q4_0", "int8", inference_only=True,
              summary="llama.cpp's Q4_0: weights in blocks of 32 4-bit ints with a float16 scale, activations "
                      "quantized to 8-bit blocks per call"),
    Precision("int4", "int4", "int8", inference_only=True,
              summary="weight-only 4-bit integer quantization (block-wise scales), activations quantized to int8 "
                      "per call inside the matrix products (ONNX Runtime GenAI's MatMulNBits at its CPU default, "
                      "accuracy level 4), inference only"),
    Precision("tf32", "float32", "tf32", accelerator_only=True,
              summary="float32 storage, TensorFloat-32 matmuls (Ampere or later GPUs)"),
)}

DEFAULT = "fp32"


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise UsageError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def parse_precisions(text: str) -> tuple[str, ...]:
    """``"fp32,bf16"`` -> ``("fp32", "bf16")``; an unknown or empty name is a usage error."""
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n for n in names):
        raise UsageError(f"--precision {text!r}: empty precision name; known: {', '.join(PRECISIONS)}")
    for n in names:
        get_precision(n)
    return tuple(dict.fromkeys(names))


def expected_dtypes(name: str) -> dict[str, str]:
    """What ``Backend.precision_info`` must report for a model built at this precision."""
    p = get_precision(name)
    return {"param_dtype": p.param_dtype, "compute_dtype": p.compute_dtype}


def unsupported(name: str, trains: bool, device: str) -> str | None:
    """Why a cell cannot run at this precision whatever the framework (None: it may)."""
    p = get_precision(name)
    if p.inference_only and trains:
        return f"{name} is {p.summary}: inference only, no training at this precision"
    if p.accelerator_only and device == "cpu":
        return f"{name} ({p.summary}) runs on a GPU only"
    return None


#: CPU flags (as Linux names them) that compute each reduced precision natively
NATIVE = {"bf16": ("amx_bf16", "avx512_bf16"), "fp16": ("amx_fp16", "avx512_fp16"),
          "int8": ("amx_int8", "avx512_vnni", "avx_vnni")}


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo (empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_support(flags: frozenset[str] | set[str]) -> dict[str, str]:
    """What the CPU does natively for each reduced precision: recorded with a run and shown beside its
    reduced-precision cells, because a slow bf16 on a CPU without bf16 instructions is the CPU's
    emulation (conversion to float32 around float32 arithmetic), not the framework's."""
    out = {}
    for kind, native in NATIVE.items():
        have = [f for f in native if f in flags]
        out[kind] = f"native ({', '.join(have)})" if have else f"no {' / '.join(native)}: emulated or widened"
    return out
