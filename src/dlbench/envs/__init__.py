"""Per-framework virtual environments: frameworks whose pins clash with each other or with the main
Python (MXNet wants NumPy < 1.24, Chainer NumPy < 2) each get a venv of their own, and dlbench
measures them there: a cell or a verification of framework F runs ``ENV/bin/python -m dlbench.worker``
when F has an environment (it takes precedence over the main Python).

Layout: ``$DLBENCH_ENVS_DIR`` (default ``~/.cache/dlbench/envs``) holds one directory per framework,
a plain venv without a pip of its own (uv, or this Python's pip, installs into it: see
:func:`_driver_pip`) plus ``dlbench-env.json``, its record (interpreter, every installed distribution's
version read from that interpreter, creation date and seconds, the requirement files used). The
record is written last, so a directory without one is a failed or interrupted build and is ignored.

A pinned version (``jax==0.4.38``, see :mod:`dlbench.envs.versions`) gets its own directory
(``jax-0.4.38``), whose requirements are the framework at that version and the companion pins of its
release line (:mod:`dlbench.envs.companions`); the rest is as for any environment.

What goes in: a recipe's lock, kept in the framework's folder
(``dlbench/frameworks/FRAMEWORK/requirements.lock``: every package and version with its hashes,
compiled by ``uv pip compile`` from the folder's ``requirements.txt``, the recipe, by ``dlbench envs
lock FRAMEWORK``), installed by ``uv pip sync --require-hashes`` into a venv made by ``uv venv``; if
the folder has ``requirements.build.txt``, its lock constrains the build environment of an sdist
(``--build-constraints``: Chainer's ``setup.py`` needs an old setuptools). An environment is
keyed by its lock: the record stores the lock's hash, and a changed lock rebuilds it. A pinned version's
environment (no lock) is installed by pip. Then dlbench itself with ``--no-deps``; from a checkout, its
``src`` is put on the environment's path by a ``.pth`` file instead (an editable install without the
build: see :func:`_link_checkout`). The measuring process imports only NumPy besides the framework (the
worker, the backends' base, models, weights, reference, verify, timer and memory modules use the
standard library and NumPy), so no other dlbench dependency is installed: the framework's NumPy pin
stays the only one.

Nothing here imports a framework or anything heavy: the registry (:mod:`dlbench.frameworks`) reads
these records to report an environment's framework as installed.
"""

from __future__ import annotations

import fcntl
import hashlib
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
from pathlib import Path
from typing import Any, Protocol

from dlbench.core.outputs import replace_file
from dlbench.envs import companions, sizes


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
           "stale", "worker_env", "create", "build_lock", "remove", "env_path", "log_path", "lock", "lock_path",
           "lock_sha256", "lock_problem", "LOCK_PYTHON", "LOCK_PLATFORM"]


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
    #: sha256 of the recipe's lock (and build lock) it was built from; "" for a pinned version (no lock)
    #: and for a record written before locks, which is then stale
    lock_sha256: str = ""
    #: bytes of the files pip installed (a pinned version's environment, :mod:`dlbench.envs.sizes`), and of
    #: them those it fetched over the network: what an estimate of the next build scales by; 0 unknown
    wheel_bytes: int = 0
    network_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def envs_dir() -> Path:
    return Path(os.environ.get("DLBENCH_ENVS_DIR") or Path.home() / ".cache" / "dlbench" / "envs").expanduser()


#: framework -> the folder holding its recipe's files, and their names there: each framework folder
#: declares its own (``dlbench/frameworks/NAME/requirements.txt``), which the registry adds here
#: (:func:`dlbench.frameworks.register`), so this package never imports the frameworks
_RECIPES: dict[str, tuple[Path, tuple[str, ...]]] = {}
#: a recipe file's role -> its name in a framework folder; a role's name as hashed is ``FRAMEWORK.ROLE``
#: (the names the recipes had before they moved into the folders, so no lock or environment went stale)
FILES = {"txt": "requirements.txt", "lock": "requirements.lock", "build.txt": "requirements.build.txt",
         "build.lock": "requirements.build.lock"}


def add_recipe(framework: str, folder: Path, files: tuple[str, ...]) -> None:
    """Register ``framework``'s recipe: its ``files`` (names of :data:`FILES`) in ``folder``."""
    unknown = set(files) - set(FILES.values())
    if unknown or FILES["txt"] not in files:
        raise EnvError(f"{framework}'s recipe files must include {FILES['txt']} and be among "
                       f"{', '.join(FILES.values())} (got {', '.join(files)})")
    _RECIPES[framework] = (Path(folder), tuple(files))


def _recipe_path(framework: str, role: str) -> Path:
    return _RECIPES[framework][0] / FILES[role]


def recipes() -> list[str]:
    """Frameworks dlbench can build an environment for (those whose folder has a requirements file)."""
    return sorted(_RECIPES)


def _read_lines(path: Path) -> list[str]:
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
    return _read_lines(_recipe_path(framework, "txt")), _read_lines(_recipe_path(framework, "build.txt"))


# --- locks ------------------------------------------------------------------------------------
#: what a lock is resolved for: the interpreter and platform environments are built on (CPython 3.11,
#: x86_64 Linux with glibc 2.28 or later); every file of each locked version is hashed, whatever its tag
LOCK_PYTHON = "3.11"
LOCK_PLATFORM = "x86_64-manylinux_2_28"
_RECIPE_SHA = "# recipe-sha256: "


def _shown(path: Path) -> str:
    """A recipe file as messages name it: its framework's folder and its name (``paddle/requirements.lock``)."""
    return f"{path.parent.name}/{path.name}"


def _recipe_files(framework: str) -> list[str]:
    """The roles (:data:`FILES`) of the recipe's requirement files, build constraints first."""
    return ["build.txt", "txt"] if _recipe_path(framework, "build.txt").is_file() else ["txt"]


def lock_path(framework: str, build: bool = False) -> Path:
    """The folder's ``requirements.lock`` (``requirements.build.lock``: the build constraints' lock)."""
    return _recipe_path(framework, "build.lock" if build else "lock")


def _recipe_sha256(framework: str) -> str:
    """The hash of the recipe's files as they are now (its lock records the one it was compiled from)."""
    h = hashlib.sha256()
    for role in _recipe_files(framework):
        h.update(f"{framework}.{role}".encode() + b"\0" + _recipe_path(framework, role).read_bytes() + b"\0")
    return h.hexdigest()


def _lock_files(framework: str) -> list[Path]:
    return [lock_path(framework, build=True), lock_path(framework)] if len(_recipe_files(framework)) == 2 \
        else [lock_path(framework)]


def lock_sha256(framework: str) -> str:
    """The identity of a recipe's environment: the hash of its lock files (a changed lock rebuilds it)."""
    h = hashlib.sha256()
    for path in _lock_files(framework):
        role = "build.lock" if path.name == FILES["build.lock"] else "lock"
        h.update(f"{framework}.{role}".encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def lock_problem(framework: str) -> str | None:
    """Why a recipe's lock cannot be built from (missing, or compiled from another version of the
    recipe), with the command that mends it; None when the lock is current."""
    for path in _lock_files(framework):
        if not path.is_file():
            return f"{framework} has no lock ({_shown(path)}): run `dlbench envs lock {framework}`"
        if f"{_RECIPE_SHA}{_recipe_sha256(framework)}" not in path.read_text():
            return (f"{framework}'s recipe changed since {_shown(path)} was compiled: "
                    f"run `dlbench envs lock {framework}`")
    return None


def lock(framework: str, progress: Callable[[str], None] = lambda s: None) -> list[Path]:
    """Compile the recipe's lock (and its build constraints' lock) with ``uv pip compile
    --generate-hashes`` for :data:`LOCK_PYTHON` on :data:`LOCK_PLATFORM`, from the index uv is
    configured with (PyPI unless ``UV_DEFAULT_INDEX``/``uv.toml`` say otherwise), and write it beside
    the recipe. Raises :class:`EnvError` with uv's own error when the recipe does not resolve."""
    requirements(framework)  # refuses a name without a recipe
    root = lock_path(framework).parent
    recipe_sha = _recipe_sha256(framework)
    written = []
    for name, build in ((FILES["build.txt"], True), (FILES["txt"], False)):
        if not (root / name).is_file():
            continue
        constraints = ["--build-constraints", lock_path(framework, build=True).name] \
            if not build and len(_recipe_files(framework)) == 2 else []
        cmd = [_uv(), "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--python-version",
               LOCK_PYTHON, "--python-platform", LOCK_PLATFORM, *constraints, name]
        progress(f"{framework}: {' '.join(['uv', *cmd[1:]])}")
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             env=_build_env(), timeout=1800)
        if out.returncode:
            raise EnvError(f"uv pip compile {name} failed (exit {out.returncode}):\n{out.stderr.strip()[-3000:]}")
        path = lock_path(framework, build)
        replace_file(path, f"# The lock of {name}: every package and version, with hashes, resolved for CPython "
                           f"{LOCK_PYTHON} on {LOCK_PLATFORM}.\n# Written by `dlbench envs lock {framework}`; "
                           f"edit {name}, then run that command.\n{_RECIPE_SHA}{recipe_sha}\n{out.stdout}")
        written.append(path)
    return written


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
    a cached environment stays valid across checkouts and commits until a requirements file changes.
    A recipe's environment is keyed by its lock: a changed lock (or a record from before locks) is stale."""
    reqs, build = requirements(record.framework)
    if "==" not in record.framework:
        if (problem := lock_problem(record.framework)) is not None:
            return problem
        if record.lock_sha256 != lock_sha256(record.framework):
            return ("its lock changed since it was built" if record.lock_sha256
                    else "it was built before environments were locked")
        return None
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


#: set in every build step's environment (its children inherit it), to the folder being built: how the
#: next build finds the steps of a build whose ``dlbench`` was killed with SIGKILL (see :func:`_stop_orphans`)
BUILD_MARK = "DLBENCH_ENV_BUILD"


def _build_env(path: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if path is not None:
        env[BUILD_MARK] = str(path)
    return env


def _run(cmd: list[str], log: Path, what: str, path: Path | None = None) -> None:
    """Run one build step (uv, pip, venv) in a process group of its own, killed as a whole when this
    process is stopped (SIGTERM, Ctrl-C: :func:`create` turns both into an exception): pip and the
    build backends it starts never outlive dlbench. ``path``: the environment built (:data:`BUILD_MARK`)."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_build_env(path), start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
    if rc:
        raise EnvError(f"{what} failed (exit {rc}):\n{_error_lines(log.read_text())}")


def _orphans(path: Path) -> list[int]:
    """Processes still building ``path`` (their environment carries its :data:`BUILD_MARK`): under the
    build lock, they can only be left by a build whose dlbench died without killing them (SIGKILL)."""
    mark = f"{BUILD_MARK}={path}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0") and int(proc.name) != os.getpid():
                found.append(int(proc.name))
        except (OSError, ValueError):  # gone meanwhile, or another user's
            continue
    return found


def _stop_orphans(framework: str, path: Path, progress: Callable[[str], None]) -> None:
    """Kill what an earlier, killed build of ``path`` left running, and wait until it is gone: a new
    build must not share the folder with a pip that still writes into it."""
    pids = _orphans(path)
    if not pids:
        return
    progress(f"{framework}: stopping {len(pids)} process(es) left by an interrupted build "
             f"(pid {', '.join(map(str, pids))})")
    deadline = time.monotonic() + 30
    while pids and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        pids = _orphans(path)  # a killed one's environ reads empty, zombie or reaped
    if pids:
        raise EnvError(f"processes of an interrupted build of {path} would not stop: pid {', '.join(map(str, pids))}")


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

    Raises :class:`EnvError` with uv's or pip's exact error when something cannot be installed (and
    for an interpreter that does not exist, or a recipe whose lock is missing or out of date); the
    half-built directory is removed and the full log kept beside it (``FRAMEWORK.log``)."""
    from dlbench.core.interrupt import signals_interrupt

    with signals_interrupt(), build_lock(info.name, progress):
        return _create(info, python, force, progress)


def _create(info: FrameworkEntry, python: str | None, force: bool, progress: Callable[[str], None]) -> EnvRecord:
    framework = info.name
    reqs, build = requirements(framework)
    locked = "==" not in framework
    if locked and (problem := lock_problem(framework)) is not None:
        raise EnvError(problem)
    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise EnvError(f"--python {python}: no such interpreter (not an executable file)")
    existing = load(framework)
    if existing and not force:
        why = stale(existing)
        if why is None:
            progress(f"{framework}: environment exists at {existing.path} "
                     f"({'lock' if locked else 'requirements'} unchanged)")
            return existing
        progress(f"{framework}: rebuilding the environment at {existing.path}: {why}")
    path = env_path(framework)
    _stop_orphans(framework, path, progress)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path(framework)
    log.write_text(f"dlbench envs create {framework} ({datetime.now(UTC).isoformat(timespec='seconds')})\n")
    started = time.perf_counter()
    base = python or getattr(sys, "_base_executable", None) or sys.executable
    env_python = path / "bin" / "python"
    try:
        fetched = None  # a locked environment's bytes are not recorded: only pinned versions are built on demand
        if locked:
            uv = _uv()
            progress(f"{framework}: creating a venv with {base} (uv venv)")
            _run([uv, "venv", "--quiet", "--python", base, str(path)], log, "creating the venv", path)
            constraints = ["--build-constraints", str(lock_path(framework, build=True))] if build else []
            progress(f"{framework}: installing {_shown(lock_path(framework))} (uv pip sync --require-hashes)")
            # --compile-bytecode: as pip does, so a measuring process's first import reads .pyc files
            # instead of writing them (uv leaves that to the first import by default)
            _run([uv, "pip", "sync", "--python", str(env_python), "--require-hashes", "--compile-bytecode",
                  *constraints, str(lock_path(framework))], log, f"installing {_shown(lock_path(framework))}", path)
            pip = [uv, "pip", "install", "--python", str(env_python)]
        else:
            pip, fetched = _pip_venv(framework, base, python is not None, reqs, path, log, progress)
        repo = _repo_root()
        source = str(repo) if repo else f"dlbench=={_dlbench_version()}"
        progress(f"{framework}: installing dlbench's measuring code (--no-deps) from {source}")
        if repo:
            _link_checkout(env_python, repo, log)
        else:
            _run([*pip, "--no-deps", source], log, "installing dlbench", path)
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
        requirements=reqs, build_requirements=build, dlbench_source=source,
        lock_sha256=lock_sha256(framework) if locked else "",
        wheel_bytes=fetched.total if fetched else 0, network_bytes=fetched.network if fetched else 0)
    replace_file(path / RECORD, json.dumps(record.to_dict(), indent=2))
    dist = info.distribution if isinstance(info.distribution, str) else info.distribution[0]
    progress(f"{framework}: {dist} {record.framework_version} ready in {record.create_seconds:.0f} s")
    return record


def _pip_venv(framework: str, base: str, other_python: bool, reqs: list[str], path: Path, log: Path,
              progress: Callable[[str], None]) -> tuple[list[str], sizes.Sizes | None]:
    """A pinned version's environment (companion pins, no lock): a venv, and pip installs ``reqs`` into
    it. Returns the pip command that installs into it, and the bytes of what it installed (None: unknown).
    pip reads the machine's pip configuration (local wheels and indexes, such as a CPU build of torch),
    which uv does not."""
    own_pip = other_python or not _driver_pip()
    progress(f"{framework}: creating a venv with {base}")
    _run([base, "-m", "venv", *([] if own_pip else ["--without-pip"]), str(path)], log, "creating the venv", path)
    env_python = path / "bin" / "python"
    pip = [str(env_python), "-m", "pip"] if own_pip else [sys.executable, "-m", "pip", "--python", str(env_python)]
    pip += ["install", "--no-input"]
    progress(f"{framework}: installing {' '.join(reqs)}")
    report = path / "pip-report.json"  # --report: pip 22.2 and later, as the driver's is (_driver_pip)
    _run([*pip, *([] if own_pip else ["--report", str(report)]), *reqs], log, f"installing {' '.join(reqs)}", path)
    fetched = None if own_pip else sizes.report_sizes(report)
    report.unlink(missing_ok=True)
    return pip, fetched


def _uv() -> str:
    """uv's binary: the ``uv`` distribution's (a dependency of dlbench), else one on the PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvError("uv is not installed (pip install uv): dlbench builds and locks environments with it") \
                from None
        return found


def _driver_pip() -> bool:
    """Whether this Python's pip can install into another interpreter (``--python``, pip 22.3 and later).
    Then an environment is a venv without a pip of its own, installed into by this pip (the same
    configuration, the same index): ensurepip is most of the time a venv takes to make, and the
    environment's packages are the same. A pinned version's environment on another Python (``python=``)
    keeps its own pip. (A recipe's environment is installed by uv from its lock.)"""
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


def remove(framework: str, progress: Callable[[str], None] = lambda s: None) -> bool:
    """Delete the framework's environment; False when there was none. Under the build lock, as
    :func:`create`: a removal waits for a build of the same environment to finish (and says so)
    instead of deleting the folder under it, and stops what a killed build left running."""
    path = env_path(framework)
    if not path.exists() and not log_path(framework).exists():
        return False
    with build_lock(framework, progress):
        _stop_orphans(framework, path, progress)
        if not path.exists():
            log_path(framework).unlink(missing_ok=True)
            return False
        shutil.rmtree(path)
        log_path(framework).unlink(missing_ok=True)
        return True
