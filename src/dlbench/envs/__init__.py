"""Per-framework virtual environments: frameworks whose pins clash with each other or with the main
Python (MXNet wants NumPy < 1.24, Chainer NumPy < 2) each get a venv of their own, and dlbench
measures them there: a cell or a verification of framework F runs ``ENV/bin/python -m dlbench.worker``
when F has an environment (it takes precedence over the main Python).

Layout: ``$DLBENCH_ENVS_DIR`` (default ``~/.cache/dlbench/envs``) holds one directory per framework,
a plain venv (without a pip of its own where this Python's pip can install into it: see
:func:`_driver_pip`) plus ``dlbench-env.json``, its record (interpreter, every installed distribution's
version read from that interpreter, creation date and seconds, the requirement files used). The
record is written last, so a directory without one is a failed or interrupted build and is ignored.

A pinned version (``jax==0.4.38``, see :mod:`dlbench.envs.versions`) gets its own directory
(``jax-0.4.38``), whose requirements are the framework at that version and the companion pins of its
release line (:mod:`dlbench.envs.companions`); the rest is as for any environment.

What goes in: the framework's pinned requirements, kept in this package
(``requirements/FRAMEWORK.txt``; if ``requirements/FRAMEWORK.build.txt`` exists it is installed
first and the framework is built without build isolation, for sdists whose ``setup.py`` needs an
old setuptools), then dlbench itself with ``--no-deps``; from a checkout, its ``src`` is put on the
environment's path by a ``.pth`` file instead (an editable install without the build: see
:func:`_link_checkout`). The measuring process imports only NumPy besides the framework (the worker, the backends'
base, models, weights, reference, verify, timer and memory modules use the standard library and
NumPy), so no other dlbench dependency is installed: the framework's NumPy pin stays the only one.

Nothing here imports a framework or anything heavy: the registry (:mod:`dlbench.frameworks`) reads
these records to report an environment's framework as installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from dlbench.envs import companions


class FrameworkEntry(Protocol):
    """What building an environment reads of a framework's registry entry
    (:class:`dlbench.frameworks.FrameworkInfo`; the registry imports this module, not the reverse)."""

    @property
    def name(self) -> str: ...
    @property
    def import_name(self) -> str: ...
    @property
    def distribution(self) -> str | tuple[str, ...]:
        """The pip distribution whose version is recorded (a tuple: alternatives, the first one wins)."""

RECORD = "dlbench-env.json"
LOG = "create.log"

__all__ = ["EnvError", "EnvRecord", "envs_dir", "recipes", "requirements", "load", "list_envs", "python_for",
           "stale", "worker_env", "create", "build_lock", "remove", "env_path", "log_path"]


class EnvError(Exception):
    """An environment could not be built; the message holds pip's own error lines."""


@dataclass
class EnvRecord:
    framework: str
    path: str
    python: str  # the interpreter the measuring processes run
    python_version: str
    created: str  # ISO 8601, UTC
    create_seconds: float
    framework_version: str | None
    #: every distribution installed in the environment, as its interpreter's importlib.metadata reports it
    versions: dict[str, str] = field(default_factory=dict)
    requirements: list[str] = field(default_factory=list)
    build_requirements: list[str] = field(default_factory=list)
    dlbench_source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def envs_dir() -> Path:
    return Path(os.environ.get("DLBENCH_ENVS_DIR") or Path.home() / ".cache" / "dlbench" / "envs").expanduser()


def _requirements_root():
    return resources.files("dlbench.envs").joinpath("requirements")


def recipes() -> list[str]:
    """Frameworks dlbench can build an environment for (those with a requirements file)."""
    return sorted(p.name[: -len(".txt")] for p in _requirements_root().iterdir()
                  if p.name.endswith(".txt") and not p.name.endswith(".build.txt"))


def _read_lines(name: str) -> list[str]:
    path = _requirements_root().joinpath(name)
    if not path.is_file():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def requirements(framework: str) -> tuple[list[str], list[str]]:
    """(requirements, build requirements) of a framework's environment; a pinned version's are its
    release line's companions (no build requirements)."""
    if "==" in framework:
        from dlbench.envs import versions

        base, version = versions.split(framework)
        try:
            versions.check(base, version)
        except versions.SpecError as exc:
            raise EnvError(str(exc)) from None
        return companions.companions(base, version), []
    if framework not in recipes():
        raise EnvError(f"no environment recipe for {framework!r}; recipes: {', '.join(recipes())}")
    return _read_lines(f"{framework}.txt"), _read_lines(f"{framework}.build.txt")


def env_path(framework: str) -> Path:
    """``jax==0.4.38`` lives in ``jax-0.4.38`` (no '=' in a venv's path); a release by any of its
    spellings (``fakerel==1.0``, ``fakerel==1.0.0``) in the one folder of its normal name."""
    from dlbench.envs import versions  # here: it imports dlbench.envs.companions, so this package first

    try:
        framework = versions.normal_name(framework)
    except versions.SpecError:
        pass  # a recipe's name, or one the caller refuses itself
    return envs_dir() / framework.replace("==", "-")


def log_path(framework: str) -> Path:
    """pip's full log of the framework's last build, kept beside the environments."""
    path = env_path(framework)
    return path.parent / f"{path.name}.log"


def load(framework: str) -> EnvRecord | None:
    """The framework's environment, or None when there is none (or its interpreter is gone)."""
    path = env_path(framework) / RECORD
    try:
        data = json.loads(path.read_text())
        record = EnvRecord(**data)
    except (OSError, ValueError, TypeError):
        return None
    return record if Path(record.python).exists() else None


def list_envs() -> list[EnvRecord]:
    root = envs_dir()
    if not root.is_dir():
        return []
    return [r for p in sorted(root.iterdir()) if p.is_dir() and (r := load(p.name)) is not None]


def stale(record: EnvRecord) -> str | None:
    """Why an existing environment no longer matches its recipe (None: it matches and is reused).

    An environment is identified by its requirement sets alone: dlbench's own code is not part of
    it (measuring processes put the driver's ``src`` first on their path, see :func:`worker_env`), so
    a cached environment stays valid across checkouts and commits until a requirements file changes."""
    reqs, build = requirements(record.framework)
    if record.requirements != reqs or record.build_requirements != build:
        return (f"its requirements ({' '.join(record.build_requirements + record.requirements)}) differ from the "
                f"recipe's ({' '.join(build + reqs)})")
    return None


def worker_env(python: str | None) -> dict[str, str]:
    """Environment variables for a measuring process run by ``python`` (an environment's interpreter):
    the driver's dlbench source first on ``PYTHONPATH``, so the environment measures with exactly the
    code of the checkout that drives it, whatever checkout it was built from. Only a source checkout's
    ``src`` is added (never an installed dlbench's site-packages, which would leak the driver's NumPy)."""
    if not python:
        return {}
    repo = _repo_root()
    if repo is None:
        return {}
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(repo / "src") + (os.pathsep + rest if rest else "")}


def python_for(framework: str) -> str | None:
    """The interpreter that measures ``framework``: its environment's, or None for this one."""
    record = load(framework)
    return record.python if record else None


# --- building ---------------------------------------------------------------------------------
def _repo_root() -> Path | None:
    """The checkout dlbench runs from (a directory with pyproject.toml above src/dlbench), if any."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "dlbench").is_dir() else None


def _run(cmd: list[str], log: Path, what: str) -> None:
    """Run one build step (pip, venv) in a process group of its own, killed as a whole when this
    process is stopped (SIGTERM, Ctrl-C: :func:`create` turns both into an exception): pip and the
    build backends it starts never outlive dlbench."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
    if rc:
        raise EnvError(f"{what} failed (exit {rc}):\n{_error_lines(log.read_text())}")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextmanager
def build_lock(framework: str, progress: Callable[[str], None] = lambda s: None) -> Iterator[None]:
    """Hold the framework's build lock (``FRAMEWORK.lock`` beside the environments, ``flock``): two
    ``dlbench envs create`` (or two runs building on demand) of one environment never build into one
    folder at once. The second waits, saying which process holds the lock, then reuses what the first
    built. The kernel drops the lock when its holder dies, however it dies."""
    path = env_path(framework)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f"{path.name}.lock"
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            progress(f"{framework}: {holder} is building this environment; waiting for it to finish")
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def _error_lines(text: str, limit: int = 25) -> str:
    """pip's own error: from the last 'error'/'ERROR' block to the end, at most ``limit`` lines."""
    lines = text.rstrip().splitlines()
    last_cmd = max((i for i, ln in enumerate(lines) if ln.startswith("$ ")), default=-1)
    lines = lines[last_cmd + 1:]
    start = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), max(0, len(lines) - limit))
    return "\n".join(lines[start:][-limit:])


PROBE = r"""
import importlib, importlib.metadata as md, json, sys
out = {"python_version": sys.version.split()[0], "versions": {}}
for d in md.distributions():
    name = d.metadata["Name"]
    if name:
        out["versions"][name] = d.version
out["import_error"] = None
for module in (sys.argv[1], "numpy", "dlbench.worker", "dlbench.gate.verify"):
    try:
        importlib.import_module(module)
    except Exception as exc:
        out["import_error"] = f"import {module}: {type(exc).__name__}: {exc}"
        break
print(json.dumps(out))
"""


def _probe(python: Path, import_name: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(python), "-c", PROBE, import_name], capture_output=True, text=True, env=env,
                         stdin=subprocess.DEVNULL, timeout=600)
    if out.returncode:
        raise EnvError(f"the environment's interpreter failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _version_of(versions: dict[str, str], distribution: str | tuple[str, ...]) -> str | None:
    lowered = {k.lower().replace("_", "-"): v for k, v in versions.items()}
    for d in (distribution,) if isinstance(distribution, str) else distribution:
        if d.lower().replace("_", "-") in lowered:
            return lowered[d.lower().replace("_", "-")]
    return None


def create(info: FrameworkEntry, python: str | None = None, force: bool = False,
           progress: Callable[[str], None] = lambda s: None) -> EnvRecord:
    """Build (or, unless ``force``, reuse) the framework's environment and record it.

    Raises :class:`EnvError` with pip's exact error when something cannot be installed; the
    half-built directory is removed and the full log kept beside it (``FRAMEWORK.log``)."""
    from dlbench.core.interrupt import signals_interrupt

    with signals_interrupt(), build_lock(info.name, progress):
        return _create(info, python, force, progress)


def _create(info: FrameworkEntry, python: str | None, force: bool, progress: Callable[[str], None]) -> EnvRecord:
    framework = info.name
    reqs, build = requirements(framework)
    existing = load(framework)
    if existing and not force:
        why = stale(existing)
        if why is None:
            progress(f"{framework}: environment exists at {existing.path} (requirements unchanged)")
            return existing
        progress(f"{framework}: rebuilding the environment at {existing.path}: {why}")
    path = env_path(framework)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path(framework)
    log.write_text(f"dlbench envs create {framework} ({datetime.now(UTC).isoformat(timespec='seconds')})\n")
    started = time.perf_counter()
    base = python or getattr(sys, "_base_executable", None) or sys.executable
    try:
        own_pip = python is not None or bool(build) or not _driver_pip()
        progress(f"{framework}: creating a venv with {base}")
        _run([base, "-m", "venv", *([] if own_pip else ["--without-pip"]), str(path)], log, "creating the venv")
        env_python = path / "bin" / "python"
        pip = ([str(env_python), "-m", "pip"] if own_pip else [sys.executable, "-m", "pip", "--python", str(env_python)])
        pip += ["install", "--no-input"]
        if build:
            progress(f"{framework}: installing build prerequisites: {' '.join(build)}")
            _run([*pip, *build], log, f"installing {' '.join(build)}")
        progress(f"{framework}: installing {' '.join(reqs)}")
        _run([*pip, *(["--no-build-isolation"] if build else []), *reqs], log, f"installing {' '.join(reqs)}")
        repo = _repo_root()
        source = str(repo) if repo else f"dlbench=={_dlbench_version()}"
        progress(f"{framework}: installing dlbench's measuring code (--no-deps) from {source}")
        if repo:
            _link_checkout(env_python, repo, log)
        else:
            _run([*pip, "--no-deps", source], log, "installing dlbench")
        probe = _probe(env_python, info.import_name)
        if probe["import_error"]:
            raise EnvError(f"the new environment cannot run dlbench's measuring code: {probe['import_error']}")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    record = EnvRecord(
        framework=framework, path=str(path), python=str(env_python), python_version=probe["python_version"],
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        create_seconds=round(time.perf_counter() - started, 1),
        framework_version=_version_of(probe["versions"], info.distribution),
        versions=dict(sorted(probe["versions"].items(), key=lambda kv: kv[0].lower())),
        requirements=reqs, build_requirements=build, dlbench_source=source)
    tmp = path / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record.to_dict(), indent=2))
    os.replace(tmp, path / RECORD)
    dist = info.distribution if isinstance(info.distribution, str) else info.distribution[0]
    progress(f"{framework}: {dist} {record.framework_version} ready in {record.create_seconds:.0f} s")
    return record


def _driver_pip() -> bool:
    """Whether this Python's pip can install into another interpreter (``--python``, pip 22.3 and later).
    Then an environment is a venv without a pip of its own, installed into by this pip (the same
    configuration, the same index): ensurepip is most of the time a venv takes to make, and the
    environment's packages are the same. An environment on another Python (``python=``) or with build
    prerequisites (an sdist built without isolation, which expects the venv's own setuptools) keeps its own pip."""
    from importlib.metadata import version

    try:
        major, minor = (int(x) for x in version("pip").split(".")[:2])
    except Exception:  # no pip here (PackageNotFoundError), or a version that is not numbers
        return False
    return (major, minor) >= (22, 3)


def _link_checkout(env_python: Path, repo: Path, log: Path) -> None:
    """Put the checkout's ``src`` on the environment's path with a ``.pth`` file: what an editable
    install of dlbench's src layout amounts to, without building it. An editable install needs
    dlbench's build backend (setuptools >= 77, wheel) fetched from the index into a build environment
    for every environment built, which a local or offline index (a framework team's mirror, the
    bisect test's) may not hold; the measuring code needs none of it."""
    out = subprocess.run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode:
        raise EnvError(f"the environment's interpreter failed: {out.stderr.strip()[-2000:]}")
    pth = Path(out.stdout.strip()) / "dlbench-checkout.pth"
    pth.write_text(str(repo / "src") + "\n")
    with open(log, "a") as f:
        f.write(f"\n$ echo {repo / 'src'} > {pth}\n")


def _dlbench_version() -> str:
    from dlbench import __version__

    return __version__


def remove(framework: str) -> bool:
    """Delete the framework's environment; False when there was none."""
    path = env_path(framework)
    if not path.exists():
        return False
    shutil.rmtree(path)
    log_path(framework).unlink(missing_ok=True)
    return True
