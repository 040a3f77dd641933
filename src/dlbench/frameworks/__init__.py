"""Registry of framework backends.

Nothing here imports a framework: whether one is installed is read from package metadata, and
a backend module is imported only by :func:`get_backend`, inside the process that measures it
(thread settings must come before the import).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field

from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError

__all__ = ["Backend", "OptimizerSpec", "UnsupportedError", "FRAMEWORKS", "FrameworkInfo", "list_frameworks",
           "get_backend", "framework_info", "UnknownFrameworkError", "check_frameworks"]


class UnknownFrameworkError(ValueError):
    """A framework name dlbench does not know, or one that is not installed."""


@dataclass(frozen=True)
class FrameworkInfo:
    name: str
    module: str  # dlbench module holding the backend class
    #: the pip distribution whose presence and version we report; a tuple lists alternatives tried
    #: in order (``tensorflow-cpu`` on CPU machines, ``tensorflow`` on GPU ones)
    distribution: str | tuple[str, ...]
    import_name: str
    variants: tuple[str, ...]
    description: str
    #: environment a variant needs before the framework is imported (e.g. KERAS_BACKEND)
    variant_env: dict[str, dict[str, str]] = field(default_factory=dict)


FRAMEWORKS: dict[str, FrameworkInfo] = {
    "torch": FrameworkInfo("torch", "dlbench.frameworks.torch", "torch", "torch", ("eager", "compile"),
                           "PyTorch (torch.nn, torch.compile)"),
    "tensorflow": FrameworkInfo("tensorflow", "dlbench.frameworks.tensorflow", ("tensorflow-cpu", "tensorflow"),
                                "tensorflow", ("function", "xla"), "TensorFlow 2 (Keras 3 layers, tf.function, XLA)"),
    "keras": FrameworkInfo("keras", "dlbench.frameworks.keras", "keras", "keras",
                           ("keras-jax", "keras-tensorflow", "keras-torch"),
                           "Keras 3 (one model on the JAX, TensorFlow and PyTorch backends; compile, train_on_batch)",
                           variant_env={"keras-jax": {"KERAS_BACKEND": "jax"},
                                        "keras-tensorflow": {"KERAS_BACKEND": "tensorflow"},
                                        "keras-torch": {"KERAS_BACKEND": "torch"}}),
}


def framework_info(name: str) -> FrameworkInfo:
    if name not in FRAMEWORKS:
        raise UnknownFrameworkError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]


def installed_version(name: str) -> str | None:
    info = framework_info(name)
    if importlib.util.find_spec(info.import_name) is None:
        return None
    candidates = (info.distribution,) if isinstance(info.distribution, str) else info.distribution
    for dist in candidates:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def list_frameworks() -> list[dict]:
    return [{"name": n, "installed": (v := installed_version(n)) is not None, "version": v,
             "variants": list(i.variants), "description": i.description} for n, i in FRAMEWORKS.items()]


def check_frameworks(names: list[str]) -> None:
    """Raise :class:`UnknownFrameworkError` for an unknown or uninstalled framework."""
    for name in names:
        if installed_version(name) is None:
            framework_info(name)  # unknown -> its own message
            raise UnknownFrameworkError(f"framework {name!r} is not installed (pip install 'dlbench[{name}]')")


def get_backend(name: str) -> Backend:
    """Import the backend (and so the framework) into this process."""
    info = framework_info(name)
    module = importlib.import_module(info.module)
    return module.Backend_()
