"""What machine and software a run measured: captured once per run and stored with it."""

from __future__ import annotations

import copy
import functools
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from dlbench import __version__
from dlbench.core.precision import cpu_support
from dlbench.measure import reuse


def git_commit() -> str | None:
    """The commit of the dlbench checkout that ran (None when installed from a wheel)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def cpu_info() -> dict[str, Any]:
    """The CPU's model, architecture and SIMD flags: read once per process (py-cpuinfo takes about a second,
    and a run asked for it twice: the estimate's history and the run's own record), and once per boot of
    the machine (:func:`_py_cpuinfo`); a copy each call."""
    return copy.deepcopy(_cpu_info())


def _boot_id() -> str | None:
    """This boot of the machine (Linux's random boot id; None elsewhere): its CPU stays the same within it
    (a virtual machine moved live to another host aside)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


@functools.cache
def _cpu_info() -> dict[str, Any]:
    try:
        info = _py_cpuinfo()
        simd = ("avx", "fma", "amx", "sse4", "neon", "sve")
        return {"model": info.get("brand_raw"), "arch": info.get("arch_string_raw"),
                "hz": info.get("hz_advertised_friendly"),
                "flags": sorted(f for f in info.get("flags", []) if f.startswith(simd)),
                "precision": cpu_support(set(info.get("flags", [])))}
    except Exception as exc:  # py-cpuinfo can fail on exotic machines; record why
        return {"model": platform.processor(), "error": str(exc)}


#: the fields of py-cpuinfo's answer that dlbench reads
CPUINFO_FIELDS = ("brand_raw", "arch_string_raw", "hz_advertised_friendly", "flags")


def _py_cpuinfo() -> dict[str, Any]:
    """py-cpuinfo's answer (:data:`CPUINFO_FIELDS`), kept for this boot of the machine in ``cpu-info.json``
    beside the gate's verdicts (``DLBENCH_CPU_INFO`` names another file, or ``off``): py-cpuinfo starts a
    Python of its own to read CPUID, about a second of every ``dlbench run`` and ``--dry-run``. Kept under
    the boot id and py-cpuinfo's version, what dlbench makes of it worked out afresh each time; a failure
    raises, and nothing is kept."""
    import cpuinfo

    boot, path = _boot_id(), reuse.setting("DLBENCH_CPU_INFO", reuse.CACHE_ROOT / "cpu-info.json")
    key = f"{boot}/py-cpuinfo {cpuinfo.CPUINFO_VERSION_STRING}"
    if boot and path is not None:
        kept = reuse.read_kept(path, lambda v: isinstance(v, dict) and isinstance(v.get("flags"), list)).get(key)
        if kept is not None:
            return kept
    info = cpuinfo.get_cpu_info()
    info = {k: info[k] for k in CPUINFO_FIELDS if k in info}
    if boot and path is not None:
        reuse.write_kept(path, {key: info})
    return info


def blas_info() -> list[dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info

        return [{k: v for k, v in d.items() if k in ("internal_api", "version", "num_threads", "threading_layer",
                                                    "architecture", "filepath")} for d in threadpool_info()]
    except Exception as exc:
        return [{"error": str(exc)}]


def gpu_info() -> list[dict[str, str]]:
    """GPUs as nvidia-smi reports them (model, driver, memory); empty without an NVIDIA driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus


def machine(env: dict[str, Any]) -> dict[str, Any]:
    """What makes two measurements' times comparable, from a captured environment: the CPU's model and
    SIMD flags, the cores the run may use, the GPUs. A different hostname alone does not count (a
    container's name changes between sessions on the same hardware)."""
    cpu = env.get("cpu") or {}
    return {"cpu": cpu.get("model"), "flags": cpu.get("flags"), "usable_cores": env.get("usable_cores"),
            "gpus": [g.get("name") for g in env.get("gpus") or []]}


def this_machine() -> dict[str, Any]:
    """``machine`` of the machine running now."""
    return machine({"cpu": cpu_info(), "usable_cores": len(os.sched_getaffinity(0)), "gpus": gpu_info()})


def machine_differences(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How two ``machine`` records differ, in words (empty: the same machine)."""
    out = []
    for key in then.keys() | now.keys():
        a, b = then.get(key), now.get(key)
        if a == b:
            continue
        if key == "flags" and isinstance(a, list) and isinstance(b, list):
            lost, gained = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            out += [f"CPU flags {' '.join(fl)} {when}" for fl, when in ((lost, "then only"), (gained, "now only")) if fl]
        else:
            out.append(f"{key} {a} then, {b} now")
    return sorted(out)


def capture(framework_versions: dict[str, str | None] | None = None) -> dict[str, Any]:
    """The run's environment. Framework build details (oneDNN, CUDA, cuDNN) come from the
    measuring processes themselves (see the verification results), not from an import here."""
    vm = psutil.virtual_memory()
    env_threads = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "OPENBLAS_CORETYPE") if k in os.environ}
    return {
        "dlbench_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "os": platform.platform(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "cpu": cpu_info(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_bytes": vm.total,
        "blas": blas_info(),
        "env": env_threads,
        "gpus": gpu_info(),
        "frameworks": framework_versions or {},
    }
