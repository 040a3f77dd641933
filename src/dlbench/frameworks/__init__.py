"""Registry of framework backends, built from the framework folders' declarations.

Each framework is one package, ``dlbench/frameworks/<name>/``, whose ``__init__.py`` declares what it
offers as plain data (:class:`~dlbench.frameworks.declaration.Declaration`): its variants, devices,
closures, precisions and its parts (backend, decoder, data-parallel worker, survey probe, environment
recipe). The registry imports those declarations only; nothing here imports a framework: whether one is
installed is read from package metadata, and a part is imported only by :func:`get_backend` and
:func:`load_part`, inside the process that uses it (thread settings must come before the import).

A framework outside dlbench is a package of the same shape in a distribution of its own, registered
by an entry point of the ``dlbench.frameworks`` group (:func:`load_entry_points`, :mod:`dlbench.core.plugins`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

from dlbench import envs
from dlbench.core import plugins
from dlbench.envs import versions
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.declaration import CompilationCache, Declaration, ReleaseLine
from dlbench.measure.peak import NUMPY, PeakEngine

__all__ = ["Backend", "OptimizerSpec", "UnsupportedError", "FRAMEWORKS", "FrameworkInfo", "list_frameworks",
           "get_backend", "framework_info", "UnknownFrameworkError", "check_frameworks", "Declaration", "BUILTIN",
           "load_part", "part_module", "with_part", "load_entry_points", "BROKEN", "Part", "PARTS", "probe_checks",
           "peak_engines"]


def _builtin_folders() -> tuple[str, ...]:
    """The built-in framework folders: the subpackages of ``dlbench.frameworks`` whose ``__init__`` holds a
    ``DECLARATION``, in their declarations' ``order`` (ties by name), so a new folder is found, not listed."""
    found = []
    for entry in pkgutil.iter_modules(__path__):
        if entry.ispkg:
            declaration = vars(importlib.import_module(f"{__name__}.{entry.name}")).get("DECLARATION")
            if isinstance(declaration, Declaration):
                found.append((declaration.order, entry.name))
    return tuple(name for _, name in sorted(found))


#: the built-in framework folders (each ``dlbench/frameworks/<name>/``), in the order they are listed
BUILTIN = _builtin_folders()


class UnknownFrameworkError(ValueError):
    """A framework name dlbench does not know, or one that is not installed."""


#: a framework's optional parts, each a module of its folder named by its declaration
Part = Literal["decoder", "dp_worker", "parameter_server", "probe", "gemm"]
PARTS: tuple[Part, ...] = get_args(Part)


@dataclass(frozen=True)
class FrameworkInfo:
    name: str
    module: str  # dlbench module holding the backend class
    #: the pip distribution whose presence and version we report; a tuple lists alternatives
    #: (``onnxruntime`` or ``onnxruntime-gpu``, ``tensorflow-cpu`` or ``tensorflow``), the first one installed wins
    distribution: str | tuple[str, ...]
    import_name: str
    variants: tuple[str, ...]
    description: str
    #: environment a variant needs before the framework is imported (e.g. KERAS_BACKEND)
    variant_env: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the closures the backend hands out (a built-in's: its declaration's, read without the import);
    #: a scenario runs where a closure it requires is among them (``Scenario.requires``)
    closures: tuple[str, ...] = ("forward", "gradient", "train_step")
    #: other import names the backend needs (onnxruntime's models are exported from torch)
    requires: tuple[str, ...] = ()
    #: per-batch closure -> the whole-data-set closure measured in its place (H2O: train_step -> epoch)
    stands_in: dict[str, str] = field(default_factory=dict)
    #: devices the backend can build on (a built-in's: its declaration's, read without the import);
    #: ``cuda`` also admits ``cuda:N``
    devices: tuple[str, ...] = ("cpu",)
    #: the pinned version of a name like ``jax==0.4.38`` (dlbench.envs.versions); None: the main Python's
    version: str | None = None
    #: its GEMM part for the machine's peak, and the other modules that GEMM needs
    gemm: str | None = None
    gemm_requires: tuple[str, ...] = ()
    #: the release lines a pinned version is built from, and why releases before them are refused
    release_lines: tuple[ReleaseLine, ...] = ()
    releases_before: str = ""
    #: variant -> its compiler's persistent cache (the declaration's)
    compilation_caches: dict[str, CompilationCache] = field(default_factory=dict)
    #: the backend class's name in ``module``
    backend_class: str = "Backend_"
    #: the declaration's other parts, as absolute ``module`` or ``module:Class`` (None: no such part)
    decoder: str | None = None
    no_decoder: str | None = None
    dp_worker: str | None = None
    dp_launcher: str = "processes"
    parameter_server: str | None = None
    probe: str | None = None
    #: the live checks the probe defines (its declaration's)
    probe_checks: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ("fp32",)
    runs_in: str = "main"
    #: the folder holding the environment recipe's files, and their names (none: no recipe)
    recipe_dir: Path | None = None
    recipes: tuple[str, ...] = ()

    #: the folder's declaration this entry was read from (None: a plug-in's entry written as a FrameworkInfo)
    declaration: Declaration | None = None

    def part(self, part: Part) -> str | None:
        """Where one of its parts is, as an absolute ``module`` or ``module:Class`` (None: it has no such part)."""
        return {"decoder": self.decoder, "dp_worker": self.dp_worker, "parameter_server": self.parameter_server,
                "probe": self.probe, "gemm": self.gemm}.get(part)

    @classmethod
    def from_declaration(cls, d: Declaration, package: str, folder: Path | None = None) -> FrameworkInfo:
        """The entry of a framework folder: ``package`` is the module its parts are named relative to
        (empty: they are absolute), ``folder`` where its recipe files are."""
        def absolute(part: str | None) -> str | None:
            return None if part is None else f"{package}.{part}" if package else part

        backend_module, _, backend_class = absolute(d.backend).partition(":")
        return cls(d.name, backend_module, d.distribution, d.import_name, d.variants, d.description,
                   variant_env={k: dict(v) for k, v in d.variant_env.items()}, closures=d.closures,
                   requires=d.requires, stands_in=dict(d.stands_in), devices=d.devices,
                   backend_class=backend_class or "Backend_", decoder=absolute(d.decoder), no_decoder=d.no_decoder,
                   dp_worker=absolute(d.dp_worker), dp_launcher=d.dp_launcher,
                   parameter_server=absolute(d.parameter_server), probe=absolute(d.probe), probe_checks=d.probe_checks,
                   precisions=d.precisions,
                   runs_in=d.runs_in, compilation_caches=dict(d.compilation_caches),
                   gemm=absolute(d.gemm), gemm_requires=d.gemm_requires, release_lines=d.release_lines,
                   releases_before=d.releases_before, declaration=d,
                   recipe_dir=folder if d.recipes else None, recipes=d.recipes)

    @property
    def base(self) -> str:
        """The framework this entry is a version of (its own name when unpinned)."""
        return versions.base_of(self.name)


def _builtin(name: str) -> FrameworkInfo:
    """A built-in folder's entry (its ``__init__`` imports nothing but the declaration module)."""
    package = f"{__name__}.{name}"
    module = importlib.import_module(package)
    return FrameworkInfo.from_declaration(module.DECLARATION, package, Path(module.__file__).parent)


FRAMEWORKS: dict[str, FrameworkInfo] = {}


def register(info: FrameworkInfo) -> None:
    """Add a backend (plugins and tests use this; see :func:`load_plugins`); its recipe, if it has one,
    is what ``dlbench envs create NAME`` builds."""
    FRAMEWORKS[info.name] = info
    if info.release_lines:
        distribution = info.distribution if isinstance(info.distribution, str) else info.distribution[0]
        envs.companions.register(info.name, distribution, info.release_lines, info.releases_before)
    if info.recipe_dir is not None:
        envs.add_recipe(info.name, info.recipe_dir, info.recipes)


def import_plugin(module: str):
    """A module by dotted name, a ``.py`` file by path (plugins outside any package), or a framework
    folder by path (its ``__init__.py``; its parts are imported as the package's modules)."""
    folder = Path(module) if not module.endswith(".py") and os.sep in module else None
    if module.endswith(".py") or folder is not None:
        import importlib.util as iu

        name = "dlbench_plugin_" + Path(module).stem
        if name in sys.modules:
            return sys.modules[name]
        spec = (iu.spec_from_file_location(name, module) if folder is None else
                iu.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)]))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load plugin {module}")
        mod = iu.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(module)


def load_plugins() -> None:
    """Backends not installed as a distribution: ``DLBENCH_PLUGINS`` lists modules, .py files or
    folders that may define ``FRAMEWORK_INFO`` (a :class:`Declaration`, whose parts are named relative
    to the module's package, or a FrameworkInfo, or a list of them) and ``SCENARIOS`` (see
    :mod:`dlbench.scenarios.registry`). An installed plug-in uses an entry point instead
    (:func:`load_entry_points`); the variable stays for what is not worth installing: a file the
    tests plant with misbehaviours (``tests/fakefw.py``), a plug-in tried before it is packaged. It
    reaches every measuring process, so such a backend runs there too, and it is read after the entry
    points, so it may replace one. A plugin must not import its framework at top level."""
    for item in filter(None, (p.strip() for p in os.environ.get("DLBENCH_PLUGINS", "").split(","))):
        module = import_plugin(item)
        infos = vars(module).get("FRAMEWORK_INFO", ())
        for info in infos if isinstance(infos, list | tuple) else [infos]:
            if isinstance(info, Declaration):
                package = module.__name__ if hasattr(module, "__path__") else (module.__package__ or "")
                info = FrameworkInfo.from_declaration(info, package, Path(module.__file__).parent)
            register(info)


#: entry-point name -> why that plug-in framework is not registered (see :func:`load_entry_points`)
BROKEN: dict[str, plugins.PluginError] = {}


def load_entry_points(entries: Iterable[importlib.metadata.EntryPoint] | None = None) -> None:
    """Frameworks of installed distributions (the ``dlbench.frameworks`` entry-point group, read once
    per process; ``entries``: those instead): each entry loads to a :class:`Declaration` whose parts
    are named relative to the package holding it, and its recipe files sit beside it. A broken entry
    (its import fails, it is no Declaration, it takes a registered name such as a built-in's) is kept
    in :data:`BROKEN` under the entry's name, one line for the command line, and registers nothing."""
    for ep in plugins.entry_points(plugins.FRAMEWORKS_GROUP) if entries is None else entries:
        try:
            declaration = plugins.load(ep, _not_a_declaration)
            if declaration.name in FRAMEWORKS:
                raise plugins.PluginError(f"{plugins.where(ep)}: framework {declaration.name!r} is already "
                                          f"registered ({FRAMEWORKS[declaration.name].module})")
        except plugins.PluginError as exc:
            BROKEN[ep.name] = exc
            continue
        module = sys.modules[ep.module]
        package = module.__name__ if hasattr(module, "__path__") else (module.__package__ or "")
        register(FrameworkInfo.from_declaration(declaration, package, Path(module.__file__).parent))


def _not_a_declaration(value: object) -> str | None:
    return None if isinstance(value, Declaration) else (
        f"loads to a {type(value).__name__}, not a dlbench.frameworks.declaration.Declaration")


def framework_info(name: str) -> FrameworkInfo:
    """A framework's entry; a pinned name (``jax==0.4.38``) gets its base framework's, with the version set."""
    try:
        base, version = versions.split(name)
    except versions.SpecError as exc:
        raise UnknownFrameworkError(str(exc)) from None
    if base not in FRAMEWORKS and base in BROKEN:
        raise UnknownFrameworkError(str(BROKEN[base]))
    if base not in FRAMEWORKS:
        raise UnknownFrameworkError(f"unknown framework {base!r}; known: {', '.join(FRAMEWORKS)}")
    if version is None:
        return FRAMEWORKS[base]
    try:
        versions.check(base, version)
    except versions.SpecError as exc:
        raise UnknownFrameworkError(str(exc)) from None
    return replace(FRAMEWORKS[base], name=f"{base}{versions.SEP}{version}", version=version)


def installed_version(name: str) -> str | None:
    """The framework's version where dlbench would measure it: its environment's (``dlbench envs``)
    when it has one, else this Python's; None when neither has it.
    A pinned name (``jax==0.4.38``) is installed in its own environment, or in this Python when this
    Python has exactly that version."""
    info = framework_info(name)
    record = envs.load(info.name)
    if record is not None and record.framework_version:
        return record.framework_version
    here = _version_here(info)
    if info.version is not None and (here is None or not versions.same_release(here, info.version)):
        return None
    return here


def _version_here(info: FrameworkInfo) -> str | None:
    """The framework's version in this interpreter (None: it or a package it requires is missing)."""
    if any(importlib.util.find_spec(m) is None for m in (info.import_name, *info.requires)):
        return None
    candidates = (info.distribution,) if isinstance(info.distribution, str) else info.distribution
    for distribution in candidates:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def list_frameworks() -> list[dict]:
    """Every framework dlbench knows, then every pinned release that has its environment
    (``dlbench envs create jax==0.4.38``), each with where it is installed."""
    pinned = sorted((r.framework for r in envs.list_envs() if versions.split(r.framework)[1] is not None),
                    key=lambda n: (versions.split(n)[0], versions.companions.release_key(versions.split(n)[1])))
    return [{"name": n, "installed": (v := installed_version(n)) is not None, "version": v,
             "variants": list(i.variants), "devices": list(i.devices), "description": i.description,
             "python": envs.python_for(n)}
            for n, i in [*FRAMEWORKS.items(), *((n, framework_info(n)) for n in pinned)]]


def check_frameworks(names: list[str]) -> None:
    """Raise :class:`UnknownFrameworkError` for an unknown or uninstalled framework. A pinned version
    passes uninstalled: its environment is built when a run needs it (:func:`dlbench.frameworks.ondemand.ensure_envs`)."""
    for name in names:
        if framework_info(name).version is None and installed_version(name) is None:
            framework_info(name)  # unknown -> its own message
            hint = f"dlbench envs create {name}" if name in envs.recipes() else f"pip install 'dlbench[{name}]'"
            raise UnknownFrameworkError(f"framework {name!r} is not installed ({hint})")


def get_backend(name: str) -> Backend:
    """Import the backend (and so the framework) into this process. A pinned name is refused when this
    interpreter has another version, so a cell never measures a version it does not name."""
    info = framework_info(name)
    if info.version is not None:
        here = _version_here(info)
        if here is None or not versions.same_release(here, info.version):
            raise UnsupportedError(f"{name}: this interpreter ({sys.executable}) has {info.base} {here or 'missing'}, "
                                   f"not {info.version} (dlbench envs create {name})")
    module = import_plugin(info.module)
    return getattr(module, info.backend_class)()


for _name in BUILTIN:
    register(_builtin(_name))

def part_module(name: str, part: Part) -> str | None:
    """The module of a framework's part (``decoder``, ``dp_worker``, ``probe``, ``gemm``); None: the framework
    has no such part, or dlbench does not know it."""
    try:
        where = framework_info(name).part(part)
    except UnknownFrameworkError:
        return None
    return None if where is None else where.partition(":")[0]


def load_part(name: str, part: Part) -> Any:
    """A framework's part, imported (and so its framework): the class a ``module:Class`` part names,
    else the module. None: the framework has no such part."""
    if part_module(name, part) is None:
        return None
    module, _, attr = framework_info(name).part(part).partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


def peak_engines() -> dict[str, PeakEngine]:
    """The engines the machine's peak is the fastest of (dlbench.measure.peak): NumPy's BLAS, then each
    framework's ``gemm`` part in the registry's order, imported only when measured (in its own process)."""
    engines = {NUMPY.name: NUMPY}
    for name in with_part("gemm"):
        info = FRAMEWORKS[name]
        engines[name] = PeakEngine(name, (info.import_name, *info.gemm_requires), partial(_measure_gemm, name))
    return engines


def _measure_gemm(name: str, threads: int, flags: frozenset[str]) -> dict[str, float]:
    return load_part(name, "gemm").measure(threads, flags)


def probe_checks(name: str) -> tuple[str, ...]:
    """The survey's live checks a framework's probe defines, as its declaration lists them (none: no
    probe, or dlbench does not know the framework)."""
    return FRAMEWORKS[name].probe_checks if name in FRAMEWORKS else ()


def with_part(part: Part) -> list[str]:
    """The frameworks that have ``part``, in the registry's order."""
    return [n for n, i in FRAMEWORKS.items() if i.part(part) is not None]


load_entry_points()
load_plugins()
