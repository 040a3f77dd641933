"""Registry of framework backends.

A built-in backend's variants, devices and scenarios are its backend class's own declarations, read
from its source (:mod:`dlbench.frameworks.declared`): one place to change them. Nothing here imports a
framework: whether one is installed is read from package metadata, and
a backend module is imported only by :func:`get_backend`, inside the process that measures it
(thread settings must come before the import).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from dlbench import envs
from dlbench.envs import versions
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.declared import declared

__all__ = ["Backend", "OptimizerSpec", "UnsupportedError", "FRAMEWORKS", "FrameworkInfo", "list_frameworks",
           "get_backend", "framework_info", "UnknownFrameworkError", "check_frameworks"]


class UnknownFrameworkError(ValueError):
    """A framework name dlbench does not know, or one that is not installed."""


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
    #: scenarios the backend can run (a built-in's: its ``Backend.scenarios``, read without the import)
    scenarios: tuple[str, ...] = ("forward", "gradient", "train_step")
    #: other import names the backend needs (onnxruntime's models are exported from torch)
    requires: tuple[str, ...] = ()
    #: per-batch scenario -> the whole-data-set scenario measured in its place (H2O: train_step -> epoch)
    stands_in: dict[str, str] = field(default_factory=dict)
    #: devices the backend can build on (a built-in's: its ``Backend.devices``, read without the import);
    #: ``cuda`` also admits ``cuda:N``
    devices: tuple[str, ...] = ("cpu",)
    #: the pinned version of a name like ``jax==0.4.38`` (dlbench.envs.versions); None: the main Python's
    version: str | None = None

    @property
    def base(self) -> str:
        """The framework this entry is a version of (its own name when unpinned)."""
        return versions.base_of(self.name)


def _builtin(name: str, distribution: str | tuple[str, ...], import_name: str, description: str,
             **kw) -> FrameworkInfo:
    """A built-in backend's entry: its variants, devices and scenarios as its backend class declares
    them (read from dlbench.frameworks.NAME's source, :mod:`dlbench.frameworks.declared`)."""
    module = f"dlbench.frameworks.{name}"
    return FrameworkInfo(name, module, distribution, import_name, description=description, **declared(module, name),
                         **kw)


FRAMEWORKS: dict[str, FrameworkInfo] = {i.name: i for i in (
    _builtin("torch", "torch", "torch", "PyTorch (torch.nn, torch.compile)"),
    _builtin("jax", "jax", "jax", "JAX + Flax + Optax (jax.jit)"),
    _builtin("onnxruntime", ("onnxruntime", "onnxruntime-gpu"), "onnxruntime", "ONNX Runtime (exported from torch)",
             requires=("torch", "onnx", "onnxscript")),
    _builtin("openvino", "openvino", "openvino", "OpenVINO (Intel's inference engine, from the ONNX export)",
             requires=("torch", "onnx", "onnxscript")),
    _builtin("tensorflow", ("tensorflow-cpu", "tensorflow"), "tensorflow",
             "TensorFlow 2 (Keras 3 layers, tf.function, XLA)", requires=("keras",)),
    _builtin("keras", "keras", "keras",
             "Keras 3 (one model on the JAX, TensorFlow and PyTorch backends; compile, train_on_batch)",
             variant_env={"keras-jax": {"KERAS_BACKEND": "jax"}, "keras-tensorflow": {"KERAS_BACKEND": "tensorflow"},
                          "keras-torch": {"KERAS_BACKEND": "torch"}}),
    # The backends below usually live in a per-framework environment (dlbench envs create NAME),
    # because their pins clash with the main Python's (see dlbench.envs and docs/environments.md).
    _builtin("mxnet", "mxnet", "mxnet", "Apache MXNet 1.9 (Gluon; hybridize = static graph)"),
    _builtin("chainer", "chainer", "chainer", "Chainer 7 (define-by-run)"),
    _builtin("pytensor", "pytensor", "pytensor", "PyTensor (Theano's successor: compiled graphs; Numba or C linker)"),
    _builtin("paddle", ("paddlepaddle", "paddlepaddle-gpu"), "paddle",
             "PaddlePaddle 3 (dynamic graph; paddle.jit.to_static)"),
    _builtin("h2o", "h2o", "h2o", "H2O-3 deep learning (JVM cluster; multilayer perceptrons, whole epochs)",
             stands_in={"train_step": "epoch", "forward": "predict"}),
    # TEMP wiring until the framework folders land: the transformers folder's backend, read as a built-in's
    FrameworkInfo("transformers", "dlbench.frameworks.transformers.backend", "transformers", "transformers",
                  description="Hugging Face transformers (its own GPT2/Llama/BERT/ViT classes from a folder of "
                              "dlbench's weights; sdpa or eager attention, torch.compile; generate() with its cache)",
                  requires=("torch",),
                  **declared("dlbench.frameworks.transformers.backend", "transformers")),
)}


def register(info: FrameworkInfo) -> None:
    """Add a backend (plugins and tests use this; see :func:`load_plugins`)."""
    FRAMEWORKS[info.name] = info


def import_plugin(module: str):
    """A module by dotted name, or a ``.py`` file by path (plugins outside any package)."""
    if module.endswith(".py"):
        import importlib.util as iu
        import sys

        name = "dlbench_plugin_" + Path(module).stem
        if name in sys.modules:
            return sys.modules[name]
        spec = iu.spec_from_file_location(name, module)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load plugin {module}")
        mod = iu.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(module)


def load_plugins() -> None:
    """Backends outside dlbench: ``DLBENCH_PLUGINS`` lists modules or .py files that may define
    ``FRAMEWORK_INFO`` (a FrameworkInfo, or a list of them) and ``SCENARIOS`` (see
    :mod:`dlbench.scenarios.registry`). The variable reaches every measuring process, so a plugin
    backend runs there too. A plugin must not import its framework at top level."""
    for item in filter(None, (p.strip() for p in os.environ.get("DLBENCH_PLUGINS", "").split(","))):
        infos = vars(import_plugin(item)).get("FRAMEWORK_INFO", ())
        for info in infos if isinstance(infos, list | tuple) else [infos]:
            register(info)


def framework_info(name: str) -> FrameworkInfo:
    """A framework's entry; a pinned name (``jax==0.4.38``) gets its base framework's, with the version set."""
    try:
        base, version = versions.split(name)
    except versions.SpecError as exc:
        raise UnknownFrameworkError(str(exc)) from None
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
    passes uninstalled: its environment is built when a run needs it (:func:`dlbench.envs.ondemand.ensure_envs`)."""
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
    return module.Backend_()


load_plugins()
