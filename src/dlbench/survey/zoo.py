"""Model zoo (Liu et al. Table 2, "Model" column): ready architectures and pretrained weights
offered by the framework's own packages, introspected where installed.

Only the framework's own packages count (``keras.applications``, ``torchvision.models``). Hubs
and separate repositories (Hugging Face, TF Hub, the ONNX Model Zoo) are named in the declared
data, never counted.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Iterable
from typing import Any

from dlbench.launch.subprocess import run_job
from dlbench.survey.catalog import features_data


def _keras_apps(apps: Any, label: str) -> dict[str, Any]:
    fns = {n: o for n, o in vars(apps).items() if not n.startswith("_") and inspect.isfunction(o)}
    pretrained = sorted(n for n, o in fns.items()
                        if inspect.signature(o).parameters.get("weights") is not None
                        and inspect.signature(o).parameters["weights"].default == "imagenet")
    return {"package": label, "architectures": len(fns), "pretrained": len(pretrained), "names": sorted(fns),
            "pretrained_names": pretrained,
            "rule": f"public functions of {label}; pretrained = those whose 'weights' argument defaults to "
                    "'imagenet' (ImageNet weights downloaded on first use)"}


def keras_zoo() -> dict[str, Any]:
    import keras

    return {**_keras_apps(keras.applications, "keras.applications"), "version": keras.__version__}


def tensorflow_zoo() -> dict[str, Any]:
    import tensorflow as tf

    return {**_keras_apps(tf.keras.applications, "tf.keras.applications"), "version": tf.__version__}


def torch_zoo() -> dict[str, Any]:
    if importlib.util.find_spec("torchvision") is None:
        return {"not_installed": "torchvision is not installed; its models are not counted here"}
    import torchvision

    names = sorted(torchvision.models.list_models())
    weights = {n: [str(w) for w in torchvision.models.get_model_weights(n)] for n in names}
    return {"package": "torchvision.models", "version": torchvision.__version__, "architectures": len(names),
            "pretrained": sum(1 for w in weights.values() if w), "pretrained_weight_sets": sum(map(len, weights.values())),
            "names": names, "weights": weights,
            "rule": "torchvision.models.list_models(); pretrained = models with at least one weights enum entry"}


INTROSPECT = {"keras": keras_zoo, "tensorflow": tensorflow_zoo, "torch": torch_zoo}


def introspect(framework: str) -> dict[str, Any]:
    """Worker side."""
    if framework not in INTROSPECT:
        return {"not_introspected": f"no model zoo to introspect in {framework}'s own packages"}
    return INTROSPECT[framework]()


def declared(key: str) -> dict[str, Any] | None:
    return (features_data()["frameworks"].get(key) or {}).get("zoo")


def collect(targets: Iterable, keys: Iterable[str], timeout: float = 600) -> dict[str, dict]:
    """Introspected entries for installed targets, declared entries for every key."""
    out: dict[str, dict] = {}
    for target in targets:
        res = run_job({"kind": "survey", "task": "zoo", "framework": target.name}, timeout, extra_env=dict(target.env))
        entry = res.result if res.status == "ok" else {"error": res.reason}
        entry.pop("cores", None)
        out[target.name] = {"introspected": entry}
    for key in keys:
        if declared(key):
            out.setdefault(key, {})["declared"] = declared(key)
    return out

