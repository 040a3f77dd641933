"""torch's GEMMs for the machine's peak (dlbench.measure.peak): MKL/oneDNN's float32 matmul, and where the CPU
computes them natively (dlbench.core.precision.NATIVE) its bfloat16 matmul (AMX-BF16 or AVX512-BF16) and its
int8 x int8 -> int32 matmul (``torch._int_mm``; AMX-INT8 or VNNI), a multiply-add counting 2 operations."""

from __future__ import annotations

from collections.abc import Callable

from dlbench.core.precision import NATIVE
from dlbench.measure.peak import best_rate, operands


def measure(threads: int, flags: frozenset[str]) -> dict[str, float]:
    import torch

    torch.set_num_threads(threads)
    ta, tb = (torch.from_numpy(x) for x in operands())
    rates = {"torch": best_rate(torch.matmul, ta, tb)}
    for precision, (x, y, matmul) in _reduced(torch, ta, tb).items():
        if any(f in flags for f in NATIVE[precision]):
            try:
                rates[f"torch:{precision}"] = best_rate(matmul, x, y)
            except RuntimeError:  # this torch build has no such kernel on this CPU
                pass
    return rates


def _reduced(torch, a, b) -> dict[str, tuple[object, object, Callable]]:
    """The reduced-precision GEMMs: operands and the multiply."""
    ia = torch.clamp(a * 32, -128, 127).to(torch.int8)
    ib = torch.clamp(b * 32, -128, 127).to(torch.int8)
    return {"bf16": (a.to(torch.bfloat16), b.to(torch.bfloat16), torch.matmul),
            "int8": (ia, ib, torch._int_mm)}
