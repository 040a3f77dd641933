"""The safetensors format read with NumPy alone (a measuring process may have nothing else): 8 bytes
little-endian header length, a JSON header (tensor name -> dtype, shape, byte offsets into the buffer;
an optional ``__metadata__``), then the raw little-endian buffer. F32, F16 and F64 become float32 by a
cast, BF16 exactly: a bfloat16 is the upper 16 bits of a float32."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8")}


class SafetensorsError(ValueError):
    """A file that is not a safetensors file dlbench can read (one line)."""


def read(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32 (F32, F16, BF16, F64), with NumPy alone."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SafetensorsError(f"cannot read {path}: {exc.strerror}") from None
    return tensors(data, path)


def tensors(data: bytes, path: Path | str) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file's bytes, float32; ``path`` names the file in errors."""
    if len(data) < 8:
        raise SafetensorsError(f"{path}: not a safetensors file (shorter than its header length)")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise SafetensorsError(f"{path}: not a safetensors file (header of {size} bytes in a {len(data)}-byte file)")
    try:
        header = json.loads(data[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not a JSON object)")
    buffer = memoryview(data)[8 + size:]
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], [int(s) for s in entry["shape"]], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name} has a malformed header entry") from None
        if dtype not in DTYPES:
            raise SafetensorsError(f"{path}: tensor {name} is {dtype}; dlbench reads {', '.join(DTYPES)}")
        if not (0 <= begin <= end <= len(buffer)) or end - begin != math.prod(shape) * DTYPES[dtype].itemsize:
            raise SafetensorsError(f"{path}: tensor {name}'s bytes [{begin}, {end}) do not hold {dtype} {shape} "
                                  "(a truncated or damaged file)")
        raw = np.frombuffer(buffer[begin:end], DTYPES[dtype]).reshape(shape)
        if dtype == "BF16":  # bfloat16 is the upper half of a float32: shift it back into place
            out[name] = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            out[name] = raw.astype(np.float32)
    return out
