"""API coverage (Liu et al. Table 1) counted by introspecting the installed packages.

Liu et al. counted names on documentation pages; here each count is a written rule applied to
the installed package, and the full list of names is kept beside it, so any number can be
audited and recounted for any version. Aliases bound to the same object count once (the
others are listed under ``aliases``). The rules run in a fresh worker process
(:func:`introspect`); :func:`collect` is the CLI-side driver.

Category decisions shared by all frameworks (why a name lands where it does):

* an *activation* is what the framework offers as an activation: torch's activation modules
  (``torch.nn.ReLU``), Keras's ``keras.activations`` functions, ``jax.nn`` functions. Keras and
  Flax activation *layers* (``keras.layers.ReLU``) wrap those functions, so they are neither
  activations (they would count relu twice) nor layers; they are listed under ``extra``;
* a *layer* is a building block with its own class, minus containers, abstract bases,
  activations and losses (and Keras's data-preprocessing layers, listed under ``extra``);
* *evaluation* means metric objects; *regulariser* means a penalty object. A framework without
  such an API gets 0 and a note saying where that job lives instead.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from dlbench.launch.subprocess import run_job

CATEGORIES = ("activation", "evaluation", "initializer", "loss", "layer", "optimizer", "regularizer")
LIU_COLUMNS = {"activation": "Activation", "evaluation": "Evaluation", "initializer": "Initializer", "loss": "Loss",
               "layer": "NN", "optimizer": "Optimizer", "regularizer": "Regularizer"}


def category(objects: dict[str, Any], rule: str, note: str = "") -> dict[str, Any]:
    """Count distinct objects; the name equal to the object's ``__name__`` (else the first) names it."""
    groups: dict[int, list[str]] = {}
    for name in sorted(objects):
        groups.setdefault(id(objects[name]), []).append(name)
    names, aliases = [], {}
    for members in groups.values():
        own = getattr(objects[members[0]], "__name__", None)
        canonical = own if own in members else members[0]
        names.append(canonical)
        if len(members) > 1:
            aliases[canonical] = [m for m in members if m != canonical]
    out = {"count": len(names), "names": sorted(names), "aliases": dict(sorted(aliases.items())), "rule": rule}
    if note:
        out["note"] = note
    return out


def empty(rule: str, note: str) -> dict[str, Any]:
    return {"count": 0, "names": [], "aliases": {}, "rule": rule, "note": note}


def public(module: Any, keep: Callable[[str, Any], bool]) -> dict[str, Any]:
    return {n: o for n, o in vars(module).items() if not n.startswith("_") and keep(n, o)}


def subclasses(module: Any, base: type, exclude: Iterable[type] = ()) -> dict[str, type]:
    skip = set(exclude) | {base}
    return public(module, lambda n, o: inspect.isclass(o) and issubclass(o, base) and o not in skip)


def _versions(*dists: str) -> dict[str, str]:
    out = {}
    for d in dists:
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


# --- torch --------------------------------------------------------------------------------
def torch_rules() -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.nn.modules import activation as act_mod
    from torch.nn.modules import container
    from torch.nn.modules.loss import _Loss

    modules = subclasses(nn, nn.Module)
    acts = {n: o for n, o in modules.items() if o.__module__ == act_mod.__name__ and n != "MultiheadAttention"}
    losses = {n: o for n, o in modules.items() if issubclass(o, _Loss)}
    containers = {n: o for n, o in modules.items() if o.__module__ == container.__name__}
    layers = {n: o for n, o in modules.items() if o.__module__.startswith("torch.nn.modules.")
              and n not in acts and n not in losses and n not in containers and not n.endswith("Base")}
    return {
        "versions": _versions("torch"),
        "activation": category(acts, "classes exported from torch.nn defined in torch.nn.modules.activation, "
                                     "minus MultiheadAttention (an attention layer living in that file)"),
        "evaluation": empty("metric classes in torch", "torch ships no metrics API (torchmetrics and torcheval "
                                                       "are separate projects)"),
        "initializer": category(public(torch.nn.init, lambda n, o: inspect.isfunction(o) and n.endswith("_")
                                       and o.__module__ == "torch.nn.init"),
                                "public functions of torch.nn.init ending in '_' (the in-place initialisers); the "
                                "names without '_' are deprecated aliases and calculate_gain is a helper"),
        "loss": category(losses, "classes exported from torch.nn subclassing torch.nn.modules.loss._Loss",
                         "includes NLLLoss2d, a deprecated alias class of NLLLoss"),
        "layer": category(layers, "nn.Module subclasses exported from torch.nn and defined in torch.nn.modules.*, "
                                  "minus containers (torch.nn.modules.container), activations, losses and *Base "
                                  "classes; Lazy* variants count as their own classes"),
        "optimizer": category(subclasses(torch.optim, torch.optim.Optimizer),
                              "classes exported from torch.optim subclassing torch.optim.Optimizer, minus the base"),
        "regularizer": empty("regulariser classes in torch", "no regulariser API: weight decay is an optimiser "
                                                             "argument; dropout is counted as a layer"),
    }


# --- keras and tf.keras -----------------------------------------------------------------------
KERAS_UTILITIES = {"serialize", "deserialize", "get"}


def keras_rules(k: Any, label: str) -> dict[str, Any]:
    """The rules on a Keras namespace ``k`` (``keras`` itself, or ``tf.keras``) named ``label``."""
    layer_classes = subclasses(k.layers, k.layers.Layer)

    def where(o: type) -> str:
        return o.__module__

    act_layers = {n: o for n, o in layer_classes.items() if where(o).startswith("keras.src.layers.activations")}
    prep_layers = {n: o for n, o in layer_classes.items() if where(o).startswith("keras.src.layers.preprocessing")}
    bases = {"Layer", "Wrapper", "InputLayer"}
    layers = {n: o for n, o in layer_classes.items() if where(o).startswith("keras.src.layers.")
              and n not in act_layers and n not in prep_layers and o.__name__ not in bases}
    interop = {n: o for n, o in layer_classes.items() if not where(o).startswith("keras.src.layers.")}
    optimizers = {n: o for n, o in subclasses(k.optimizers, k.optimizers.Optimizer).items()
                  if not any("optimizer" in p for p in inspect.signature(o.__init__).parameters)}
    metric_wrappers = {k.metrics.MeanMetricWrapper}
    return {
        "activation": category(public(k.activations, lambda n, o: inspect.isfunction(o) and n not in KERAS_UTILITIES),
                               f"functions in {label}.activations minus serialize/deserialize/get"),
        "evaluation": category(subclasses(k.metrics, k.metrics.Metric, metric_wrappers),
                               f"classes in {label}.metrics subclassing Metric, minus Metric and MeanMetricWrapper "
                               "(bases); the function forms of the same metrics are not counted again"),
        "initializer": category(subclasses(k.initializers, k.initializers.Initializer),
                                f"classes in {label}.initializers subclassing Initializer, minus the base "
                                "(lower-case names are aliases of the classes)"),
        "loss": category(subclasses(k.losses, k.losses.Loss),
                         f"classes in {label}.losses subclassing Loss, minus the base; function forms not counted"),
        "layer": category(layers, f"classes in {label}.layers subclassing Layer and defined under keras.src.layers, "
                                  "minus activation layers, preprocessing layers and the bases Layer, Wrapper, "
                                  "InputLayer"),
        "optimizer": category(optimizers, f"classes in {label}.optimizers subclassing Optimizer, minus the base and "
                                          "wrappers whose constructor takes another optimizer"),
        "regularizer": category(subclasses(k.regularizers, k.regularizers.Regularizer),
                                f"classes in {label}.regularizers subclassing Regularizer, minus the base"),
        "extra": {"activation_layers": category(act_layers, "keras.src.layers.activations classes (not counted)"),
                  "preprocessing_layers": category(prep_layers, "keras.src.layers.preprocessing classes (not counted)"),
                  "interop_layers": category(interop, "Layer subclasses defined outside keras.src.layers "
                                                      "(wrappers of JAX, Flax, torch, SavedModel; not counted)")},
    }


def keras_api() -> dict[str, Any]:
    import keras

    return {"versions": _versions("keras"), "backend": keras.backend.backend(), **keras_rules(keras, "keras")}


TF_NN_ACTIVATIONS_BY_NAME = ("sigmoid", "tanh", "softmax", "log_softmax")


def tensorflow_api() -> dict[str, Any]:
    import tensorflow as tf

    out = keras_rules(tf.keras, "tf.keras")
    nn_acts = public(tf.nn, lambda n, o: callable(o) and not inspect.isclass(o) and (
        n in TF_NN_ACTIVATIONS_BY_NAME or _first_param(o) == "features"))
    nn_cat = category(nn_acts, "tf.nn functions whose first parameter is 'features' (the relu family), plus "
                               + ", ".join(TF_NN_ACTIVATIONS_BY_NAME))
    keras_acts = out["activation"]
    merged = union(keras_acts, nn_cat)
    out["activation"] = {**merged, "rule": "distinct activations in tf.keras.activations (rule as keras) or tf.nn ("
                                          + nn_cat["rule"] + "); a name or alias on both sides counts once",
                         "parts": {"tf.keras.activations": keras_acts["names"], "tf.nn": nn_cat["names"]}}
    out["versions"] = _versions("tensorflow", "tensorflow-cpu", "keras", "tf-keras")
    out["note"] = (f"tf.keras is {tf.keras.__name__} (Keras {_versions('keras').get('keras', '?')}): TensorFlow 2's "
                   "high-level API is Keras, counted by the keras rules; other differences from the keras row are "
                   "names the tf.keras namespace does not export")
    return out


def union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two categories as one: groups of names (a name and its aliases) that share a name merge."""
    groups: list[set[str]] = []
    for cat in (a, b):
        for name in cat["names"]:
            group = {name, *cat["aliases"].get(name, [])}
            for other in [g for g in groups if g & group]:
                group |= other
                groups.remove(other)
            groups.append(group)
    names = sorted(min(g) for g in groups)
    aliases = {min(g): sorted(g - {min(g)}) for g in groups if len(g) > 1}
    return {"count": len(names), "names": names, "aliases": dict(sorted(aliases.items()))}


def _first_param(fn: Any) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params[0] if params else None


# --- jax, flax, optax ---------------------------------------------------------------------------
JAX_NN_NOT_ACTIVATIONS = ("dot_product_attention", "get_scaled_dot_general_config", "scaled_dot_general",
                          "scaled_matmul", "one_hot", "logsumexp", "logmeanexp", "log1mexp", "standardize")
OPTAX_NOT_LOSSES = ("smooth_labels", "make_fenchel_young_loss")


def jax_api() -> dict[str, Any]:
    import jax
    import optax
    from flax import nnx

    acts = public(jax.nn, lambda n, o: callable(o) and not inspect.ismodule(o) and n not in JAX_NN_NOT_ACTIVATIONS)
    modules = subclasses(nnx, nnx.Module)
    act_layers = {n: o for n, o in modules.items() if o.__module__.startswith("flax.nnx.nn.activations")}
    layers = {n: o for n, o in modules.items() if o.__module__.startswith("flax.nnx.nn.")
              and n not in act_layers and not n.endswith("Base")}

    def alias_module(o: Any) -> str:
        return getattr(getattr(o, "func", o), "__module__", "")

    optimizers = public(optax, lambda n, o: callable(o) and alias_module(o) == "optax._src.alias")
    metric_bases = {nnx.metrics.MultiMetric}
    return {
        "versions": _versions("jax", "jaxlib", "flax", "optax"),
        "activation": category(acts, "public callables of jax.nn minus non-activations: "
                                     + ", ".join(JAX_NN_NOT_ACTIVATIONS)),
        "evaluation": category(subclasses(nnx.metrics, nnx.metrics.Metric, metric_bases),
                               "classes in flax.nnx.metrics subclassing Metric, minus Metric and MultiMetric "
                               "(a container)"),
        "initializer": category(public(jax.nn.initializers, lambda n, o: inspect.isfunction(o)),
                                "public functions of jax.nn.initializers (each returns an init function)"),
        "loss": category(public(optax.losses, lambda n, o: inspect.isfunction(o) and n not in OPTAX_NOT_LOSSES),
                         "public functions of optax.losses minus helpers: " + ", ".join(OPTAX_NOT_LOSSES)),
        "layer": category(layers, "flax.nnx.Module subclasses exported from flax.nnx and defined under flax.nnx.nn, "
                                  "minus activation modules and *Base classes (Flax NNX: the API dlbench's jax "
                                  "backend uses)"),
        "optimizer": category(optimizers, "callables exported from optax defined in optax._src.alias (the "
                                          "optimiser aliases: sgd, adam, ...); optax.contrib not counted"),
        "regularizer": empty("regulariser objects in JAX/Flax/Optax",
                             "none: weight decay is a gradient transformation (optax.add_decayed_weights)"),
        "extra": {"activation_layers": category(act_layers, "flax.nnx.nn.activations modules (not counted)")},
    }


def onnxruntime_api() -> dict[str, Any]:
    reason = "n/a: ONNX Runtime runs ONNX graphs and trains nothing; its 'API' is the ONNX operator set"
    return {"versions": _versions("onnxruntime"), "not_applicable": reason}


RULES: dict[str, Callable[[], dict[str, Any]]] = {
    "torch": torch_rules, "keras": keras_api, "tensorflow": tensorflow_api, "jax": jax_api,
    "onnxruntime": onnxruntime_api,
}


def introspect(framework: str) -> dict[str, Any]:
    """Worker side: apply the framework's rules to the installed package."""
    if framework not in RULES:
        return {"not_applicable": f"no API-coverage rules written for {framework!r}"}
    return RULES[framework]()


def collect(targets: Iterable, timeout: float = 600) -> dict[str, dict]:
    """CLI side: one fresh process per installed framework."""
    out = {}
    for target in targets:
        result = run_job({"kind": "survey", "task": "api", "framework": target.name}, timeout,
                         extra_env=dict(target.env))
        if result.status == "ok":
            result.result.pop("cores", None)
            out[target.name] = result.result
        else:
            out[target.name] = {"error": result.reason}
    return out
