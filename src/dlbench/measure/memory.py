"""Host and device memory: the resident-set high-water mark of the measuring process."""

from __future__ import annotations

import resource


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def current_rss_bytes() -> int:
    kb = _status_kb("VmRSS")
    return (kb or 0) * 1024


def peak_rss_bytes() -> int:
    """High-water mark of this process's resident set (VmHWM; ru_maxrss where /proc is absent)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb * 1024


def nvml_used_bytes() -> dict[str, int]:
    """Device memory in use per GPU as NVML sees it (all processes); empty without NVML."""
    try:
        import pynvml  # type: ignore
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            out[f"nvml_used_bytes_gpu{i}"] = int(info.used)
        pynvml.nvmlShutdown()
        return out
    except Exception:  # NVML present but no driver
        return {}
