"""Setup cost (Liu et al. Table 4): install, download and import, measured in a scratch venv
only when asked (``--measure-setup``); how multi-node runs are launched (declared); and the
code-conversion effort from single-worker to distributed training, as the size of the diff
between dlbench's own two implementations for the framework.

The measurement installs real packages from the package index into a throw-away virtual
environment under a temporary directory; nothing touches the running Python.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dlbench.frameworks.ondemand import du
from dlbench.survey.catalog import Target, features_data, installed_distribution

SRC = Path(__file__).resolve().parents[1]  # src/dlbench
#: what to import when timing the import, and environment it needs
IMPORTS = {"jax": "import jax, flax.nnx, optax", "keras": "import keras"}
IMPORT_ENV = {"keras": {"KERAS_BACKEND": "jax"}}
#: what else a framework needs before it can be imported at all, and why. Keras alone cannot be
#: imported without one: measured here, even its NumPy backend needs scipy and jax.
EXTRA_SPECS = {"keras": (["jax"], "keras with its JAX backend (keras alone cannot be imported; the sizes include "
                                  "jax and jaxlib)")}


def install_spec(target: Target) -> tuple[list[str], list[str]]:
    """Pinned requirement(s) for the version installed here, and extra pip arguments."""
    found = installed_distribution(target)
    if found is None:
        return [target.distributions[0]], []
    dist, version = found
    specs = [f"{dist}=={version}"]
    for companion in target.companions:
        if companion in ("jaxlib", "onnx", "orbax-checkpoint"):
            continue  # pulled in as dependencies
        try:
            specs.append(f"{companion}=={importlib.metadata.version(companion)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    for name in EXTRA_SPECS.get(target.name, ([], ""))[0]:
        try:
            specs.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            specs.append(name)
    extra = ["--index-url", "https://download.pytorch.org/whl/cpu"] if "+cpu" in version else []
    return specs, extra



def _run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.perf_counter() - started


def _error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")


def measure(specs: list[str], import_stmt: str, extra_args: list[str] | None = None, timeout: float = 1800,
            import_env: dict[str, str] | None = None, python: str = sys.executable) -> dict[str, Any]:
    """Download, install and import ``specs`` in a new venv; sizes in bytes, times in seconds."""
    extra = list(extra_args or [])
    out: dict[str, Any] = {"install_command": "pip install " + " ".join(extra + specs), "import": import_stmt}
    with tempfile.TemporaryDirectory(prefix="dlbench-setup-") as tmp:
        venv, wheels = Path(tmp) / "venv", Path(tmp) / "wheels"
        proc, _ = _run([python, "-m", "venv", str(venv)], timeout)
        if proc.returncode:
            return {**out, "status": "failed", "step": "venv", "error": _error(proc)}
        vpy = str(venv / "bin" / "python")
        site = Path(subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        before = du(site)
        proc, seconds = _run([vpy, "-m", "pip", "download", "--disable-pip-version-check", "-d", str(wheels),
                              *extra, *specs], timeout)
        if proc.returncode:
            return {**out, "status": "failed", "step": "pip download", "error": _error(proc)}
        files = sorted(wheels.iterdir())
        out.update(download_bytes=sum(f.stat().st_size for f in files), download_files=len(files),
                   download_s=round(seconds, 2))
        proc, seconds = _run([vpy, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
                              "--find-links", str(wheels), *specs], timeout)
        if proc.returncode:
            return {**out, "status": "failed", "step": "pip install", "error": _error(proc)}
        out.update(install_s=round(seconds, 2), installed_bytes=du(site) - before)
        code = f"import time; t = time.perf_counter(); {import_stmt}; print(time.perf_counter() - t)"
        env = {**os.environ, **(import_env or {})}
        env.pop("PYTHONPATH", None)
        proc, _ = _run([vpy, "-c", code], timeout, env=env)
        if proc.returncode:
            return {**out, "status": "failed", "step": "import", "error": _error(proc)}
        out.update(import_s=round(float(proc.stdout.strip().splitlines()[-1]), 3), status="ok",
                   note="one sample each on a shared machine: indicative, not a benchmark")
    return out


def measure_target(target: Target, timeout: float = 1800) -> dict[str, Any]:
    specs, extra = install_spec(target)
    stmt = IMPORTS.get(target.name, f"import {target.import_name}")
    out = measure(specs, stmt, extra, timeout, IMPORT_ENV.get(target.name))
    if target.name in EXTRA_SPECS:
        out["what"] = EXTRA_SPECS[target.name][1]
    return out


def conversion_effort(framework: str, src: Path = SRC) -> dict[str, Any]:
    """Lines changed between dlbench's single-worker backend and its distributed code: the framework
    folder's ``backend.py`` and its ``dp_worker.py``."""
    folder = src / "frameworks" / framework
    single, dist = folder / "backend.py", folder / "dp_worker.py"
    if not dist.exists() or not single.exists():
        return {"status": "not yet implemented in dlbench",
                "looked_for": [f"src/dlbench/{dist.relative_to(src).as_posix()}"],
                "single": str(single.relative_to(src.parent)) if single.exists() else None}
    a, b = single.read_text().splitlines(), dist.read_text().splitlines()
    diff = list(difflib.unified_diff(a, b, lineterm="", n=3))
    changed = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return {"status": "measured", "single": str(single.relative_to(src.parent)), "distributed":
            str(dist.relative_to(src.parent)), "diff_lines": len(diff), "added": sum(ln[0] == "+" for ln in changed),
            "removed": sum(ln[0] == "-" for ln in changed),
            "rule": "difflib.unified_diff (3 lines of context) between the two files; added + removed lines"}


def declared(key: str) -> dict[str, Any]:
    return (features_data()["frameworks"].get(key) or {}).get("setup") or {}


def collect(targets: list[Target], keys: list[str], measure_install: bool, progress=None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for key in keys:
        entry: dict[str, Any] = {"declared": declared(key)}
        target = next((t for t in targets if t.name == key), None)
        if target is not None:
            entry["conversion"] = conversion_effort(key)
            if measure_install:
                if progress:
                    progress(f"{key}: measuring setup in a scratch venv")
                entry["measured"] = measure_target(target)
        out[key] = entry
    return out
