"""Which frameworks the survey covers, and the dated data files it ships.

Today's frameworks come from two places: dlbench's backend registry (what is benchmarked here)
and :data:`TODAY` (what the survey knows how to probe even before its backend is merged). The
papers' frameworks and every declared value come from ``data/features.yaml``. Nothing here
imports a framework: installation is read from package metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).with_name("data")
FEATURES_FILE = DATA_DIR / "features.yaml"
POPULARITY_FILE = DATA_DIR / "popularity.yaml"
INSTALLABLE_FILE = DATA_DIR / "installable.yaml"


@dataclass(frozen=True)
class Target:
    """A framework the survey can check live: its pip distributions and import name."""

    name: str
    display: str
    distributions: tuple[str, ...]
    import_name: str
    #: other distributions whose versions and licences belong to the row (Flax, Optax for JAX)
    companions: tuple[str, ...] = ()
    #: environment for its probe processes
    env: dict[str, str] = field(default_factory=dict)


TODAY: dict[str, Target] = {
    "torch": Target("torch", "PyTorch", ("torch",), "torch"),
    "jax": Target("jax", "JAX (+ Flax, Optax)", ("jax",), "jax", ("jaxlib", "flax", "optax", "orbax-checkpoint")),
    "tensorflow": Target("tensorflow", "TensorFlow", ("tensorflow", "tensorflow-cpu"), "tensorflow",
                         env={"KERAS_BACKEND": "tensorflow"}),
    "keras": Target("keras", "Keras 3", ("keras",), "keras", env={"KERAS_BACKEND": "jax"}),
    "onnxruntime": Target("onnxruntime", "ONNX Runtime", ("onnxruntime", "onnxruntime-gpu"), "onnxruntime",
                          ("onnx",)),
}


def targets() -> dict[str, Target]:
    """TODAY plus any registered backend it does not know (plugins), in a stable order."""
    from dlbench.frameworks import FRAMEWORKS

    out = dict(TODAY)
    for name, info in FRAMEWORKS.items():
        if name not in out:
            dists = (info.distribution,) if isinstance(info.distribution, str) else tuple(info.distribution)
            out[name] = Target(name, short_name(info.description), dists, info.import_name)
    return out


def short_name(description: str) -> str:
    """A backend's name without its parenthesised gloss: 'PyTensor (Theano's successor: ...)' -> 'PyTensor'."""
    return description.split(" (", 1)[0].strip()


def env_version(name: str) -> tuple[str, str] | None:
    """(distribution, version) of a framework installed in its own dlbench environment, or None."""
    from dlbench import envs

    record = envs.load(name)
    if record is None or not record.framework_version:
        return None
    return name, record.framework_version


def installed_distribution(target: Target) -> tuple[str, str] | None:
    """(distribution, version) of the first of the target's distributions that is installed."""
    if importlib.util.find_spec(target.import_name) is None:
        return None
    for dist in target.distributions:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def registered(name: str) -> bool:
    from dlbench.frameworks import FRAMEWORKS

    return name in FRAMEWORKS


@cache
def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def features_data() -> dict[str, Any]:
    return _load(str(FEATURES_FILE))


def popularity_data(path: Path | None = None) -> dict[str, Any]:
    return _load(str(path or POPULARITY_FILE))


def installable_data() -> dict[str, Any]:
    return _load(str(INSTALLABLE_FILE)) if INSTALLABLE_FILE.exists() else {}


def clear_cache() -> None:
    _load.cache_clear()


def all_framework_keys() -> list[str]:
    """Every row of the survey: today's (registry first), then the papers' in file order."""
    keys = list(targets())
    keys += [k for k in features_data()["frameworks"] if k not in keys]
    return keys


def display_name(key: str) -> str:
    entry = features_data()["frameworks"].get(key)
    if entry:
        return entry["name"]
    target = targets().get(key)
    return target.display if target else key
