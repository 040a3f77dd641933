"""What is safe to reuse across runs on one host, and the marks that say a cell reused it.

* **The gate's verdict.** Verifying a (framework, variant, model, device, precision) costs a process
  and a few seconds per model, and its answer changes only when something it depends on does. A
  ``pass`` is kept in a per-host file (:func:`gate_cache_path`) under a key of the group and an
  *environment fingerprint* (:func:`fingerprint`): the Python that runs the framework and every
  distribution it has installed (:func:`installs`: as that interpreter reports them, never a record
  of what was installed once, since the companions compute the function as much as the framework
  does), a digest of every file in their install directories (:func:`files_digest`: an edit in place
  keeps the version number), the variant's environment variables, this machine (CPU model and SIMD
  flags, host name) and a hash of dlbench's own source (backends, the float64 reference, the gate)
  and of a plug-in backend's module. Any change re-verifies. A failure is never kept: it is checked
  again every run, and an entry that is not an explicit, whole pass (:func:`reusable`) reads as
  absent. A cell whose verdict came from the file says so (``metrics.reused.gate``).
* **Frameworks' persistent compilation caches** (JAX's ``jax_compilation_cache_dir``, TorchInductor's
  ``TORCHINDUCTOR_CACHE_DIR``: each framework folder declares its variants'), offered to the processes
  of timed cells of the frameworks that have one (:func:`compilation_cache_env`): a process then reads
  the compiled code an earlier one wrote, which shortens the build and the first call, never a timed
  call. Never for the ``compile`` scenario, whose figure *is* the compile. A cell offered one says so,
  with the entries the cache held before it (``metrics.reused.compilation_cache``): its ``first_call``
  may be a cache read.

``DLBENCH_GATE_CACHE`` and ``DLBENCH_COMPILATION_CACHE`` name other places, or ``off``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dlbench.core.outputs import replace_file

#: where dlbench keeps what it reuses across runs
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlbench"


def setting(var: str, default: Path) -> Path | None:
    """The file or folder ``var`` names, ``default`` when unset, None when it says ``off`` (or 0, no, empty)."""
    value = os.environ.get(var)
    if value is None:
        return default
    return None if value.strip().lower() in ("", "off", "0", "no") else Path(value)


def read_kept(path: Path, keep: Callable[[Any], bool]) -> dict[str, Any]:
    """A per-host JSON object of kept entries, those ``keep`` accepts; a missing, unreadable or malformed
    file is an empty one (it is made again, nothing else)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return {k: v for k, v in data.items() if keep(v)} if isinstance(data, dict) else {}


def write_kept(path: Path, data: dict[str, Any]) -> None:
    """Write the kept entries through a temporary file, so a crash never leaves half a file; a file that
    cannot be written costs the work again next time, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(data, default=str))
    except OSError:
        pass


# --- compilation caches ------------------------------------------------------------------------------
def compilation_cache_dir() -> Path | None:
    return setting("DLBENCH_COMPILATION_CACHE", CACHE_ROOT / "compilation")


def compilation_cache_env(framework: str, compiler: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables that give a cell's measuring process its framework's persistent
    compilation cache (empty: none for its framework and variant). ``compiler`` and ``env`` are what the
    framework declares for the variant (``{dir}`` in a value stands for the cache's directory), handed
    down by :func:`dlbench.scenarios.base.run_in_turn`; the ``compile`` scenario, whose figure is the
    compile, starts its processes itself, without it."""
    root = compilation_cache_dir()
    if root is None or compiler is None:
        return {}
    where = root / compiler / framework
    return {var: value.replace("{dir}", str(where)) for var, value in env.items()}


def compilation_cache_mark(framework: str, compiler: str | None, env: Mapping[str, str]) -> dict[str, Any] | None:
    """What a cell stores about the cache it is offered (taken before its first process): the directory
    and how many files it held then (0: nothing to reuse yet, it fills the cache)."""
    root = compilation_cache_dir()
    if root is None or compiler is None:
        return None
    where = root / compiler / framework
    entries = sum(1 for p in where.rglob("*") if p.is_file()) if where.is_dir() else 0
    return {"compiler": compiler, "dir": str(where), "entries_before": entries}


# --- the gate's verdicts -----------------------------------------------------------------------------
def gate_cache_path() -> Path | None:
    return setting("DLBENCH_GATE_CACHE", CACHE_ROOT / "gate-verdicts.json")


@cache
def _source_hash(extra: tuple[str, ...] = ()) -> str:
    """A hash of every file of dlbench's package (and ``extra`` files): a change in the models, the
    weights, a backend, the float64 reference or the gate re-verifies."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")) + [Path(p) for p in extra]:
        try:
            h.update(str(path.relative_to(root) if path.is_relative_to(root) else path).encode())
            h.update(path.read_bytes())
        except OSError:
            h.update(b"missing")
    return h.hexdigest()[:16]


#: run by the interpreter that measures a framework (stdlib only, any Python 3.8+): itself, every
#: distribution it can import, and the directories they are installed in
INSTALLS_PROBE = r"""
import importlib.metadata as md, json, os, sys, sysconfig
dists = list(md.distributions())
paths = sysconfig.get_paths()
site = {paths["purelib"], paths["platlib"]} | {str(d.locate_file("")) for d in dists}
exe = os.path.realpath(sys.executable)
st = os.stat(exe)
print(json.dumps({"interpreter": [sys.version, exe, st.st_size, st.st_mtime_ns],
                  "distributions": sorted([d.metadata.get("Name") or "?", d.metadata.get("Version") or "?"]
                                         for d in dists),
                  "site": sorted(p for p in site if os.path.isdir(p))}))
"""


@dataclass(frozen=True)
class Installs:
    """What an interpreter has installed, as it reports itself: a companion package (Flax beside JAX,
    NumPy, ml_dtypes) computes the function as much as the framework does, and a file edited in place
    keeps its version number."""

    interpreter: tuple[Any, ...]  # sys.version, the executable's real path, its size and mtime
    distributions: tuple[tuple[str, str], ...]  # (name, version) of each, sorted
    files: str  # :func:`files_digest` of the directories they are installed in


_INSTALLS: dict[tuple[str, str], Installs | None] = {}


def installs(python: str, env: dict[str, str]) -> Installs | None:
    """What ``python``, started with ``env`` (its ``PYTHONPATH`` decides what it can import), has
    installed; None when it cannot say (a verdict then is neither reused nor kept). Read once per
    process and interpreter: the estimate and the run ask in turn."""
    key = (python, env.get("PYTHONPATH", ""))
    if key not in _INSTALLS:
        _INSTALLS[key] = _read_installs(python, env)
    return _INSTALLS[key]


def forget_installs() -> None:
    """Read every interpreter's installs afresh at the next :func:`installs` (a long-lived process
    that changed one)."""
    _INSTALLS.clear()


def _read_installs(python: str, env: dict[str, str]) -> Installs | None:
    try:
        out = subprocess.run([python, "-c", INSTALLS_PROBE], capture_output=True, text=True, env=env,
                             stdin=subprocess.DEVNULL, timeout=120)
        report = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
        return Installs(tuple(report["interpreter"]), tuple(tuple(d) for d in report["distributions"]),
                        files_digest([Path(p) for p in report["site"]]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError, TypeError):
        return None


def files_digest(roots: list[Path]) -> str:
    """A digest of the relative path, size and modification time of every file under ``roots``: a file
    edited in place (same version number) changes it. Stat only, never the contents, so the
    framework's whole install (torch, TensorFlow and JAX: some 10^5 files) costs about a second.
    ``__pycache__`` is left out: an interpreter writes it as it imports."""
    h = hashlib.sha256()

    def walk(folder: str, rel: str) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        walk(e.path, f"{rel}{e.name}/")
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            h.update(f"{rel}{e.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())

    for root in roots:
        h.update(f"{root}\n".encode())
        walk(str(root), "")
    return h.hexdigest()[:16]


def fingerprint(framework: str, variant: str, python: str, installed: Installs | None,
                variant_env: dict[str, str] | None, machine: dict[str, Any], module_file: str | None) -> str | None:
    """What a verdict depends on, hashed (see the module's docstring); None when the interpreter could
    not say what it has installed, so nothing is reused or kept."""
    if installed is None:
        return None
    extra = (module_file,) if module_file and module_file.endswith(".py") else ()
    parts = {"framework": framework, "variant": variant, "python": python, "interpreter": installed.interpreter,
             "distributions": installed.distributions, "files": installed.files, "env": variant_env or {},
             "machine": machine, "host": platform.node(), "source": _source_hash(extra)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def gate_key(framework: str, variant: str, model: str, device: str, precision: str, optimizer: str, fp: str) -> str:
    """A verdict's key: its ``optimizer`` is the one whose update the gate checked (a pass for SGD says
    nothing of AdamW)."""
    return "/".join((framework, variant, model, device, precision, optimizer, fp))


def reusable(entry: Any) -> bool:
    """Whether a kept entry may stand for a verification: an explicit pass with every field the runner
    reads (``reason``, ``data``, ``run_id``). Anything else, a ``fail``, a verdict nobody wrote, a
    string, a list, reads as absent: the group is verified again."""
    return (isinstance(entry, dict) and entry.get("verdict") == "pass" and isinstance(entry.get("reason"), str)
            and isinstance(entry.get("data"), dict) and entry["data"].get("verdict", "pass") == "pass"
            and isinstance(entry.get("run_id"), str))


class GateCache:
    """The per-host file of verdicts that passed; a missing or unreadable file is an empty cache, an
    entry that is not :func:`reusable` is absent, and writes go through a temporary file so a crash
    never leaves half a file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = gate_cache_path() if path is None else path
        self.data: dict[str, dict[str, Any]] = {} if self.path is None else read_kept(self.path, reusable)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key) if self.enabled else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.put_all({key: entry})

    def put_all(self, entries: dict[str, dict[str, Any]]) -> None:
        """Keep the reusable ``entries`` (a gate process's models, per optimiser), the file written once."""
        kept = {k: e for k, e in entries.items() if reusable(e)}
        if self.path is None or not kept:
            return
        self.data.update(kept)
        write_kept(self.path, self.data)  # one that cannot be written costs a re-verification next run
