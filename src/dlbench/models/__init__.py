"""The model registry: names -> spec factories, and the small inputs the equivalence gate uses.

A model reference is a name with optional options, ``alexnet:lrn=0:groups=1`` or
``sae:phase=pretrain2``; values are parsed to the type of the factory's default. ``hf:DIR[:layers=N]``
names a Hugging Face folder (:mod:`dlbench.models.hf_checkpoint`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from dlbench.models import hf_checkpoint, split, zoo
from dlbench.models.spec import InputSpec, LossSpec, ModelSpec

__all__ = ["ModelSpec", "InputSpec", "LossSpec", "list_models", "get_model", "parse_model_ref",
           "UnknownModelError", "verify_spec", "canonical_ref"]


class UnknownModelError(ValueError):
    """A model name or option that the registry does not know."""


@dataclass(frozen=True)
class Entry:
    factory: Callable[..., ModelSpec]
    small: dict = field(default_factory=dict)  # inputs for the equivalence gate: same layers, small size


REGISTRY: dict[str, Entry] = {
    "lenet": Entry(zoo.lenet),
    "alexnet": Entry(zoo.alexnet, {"image_size": 67, "classes": 10}),
    "alexnet-s": Entry(zoo.alexnet_s, {"image_size": 67, "classes": 10}),
    "sae": Entry(zoo.sae),
    "sae-large": Entry(zoo.sae_large),
    "lstm-imdb": Entry(zoo.lstm_imdb, {"vocab": 500, "max_len": 24}),
    "fcn-s": Entry(zoo.fcn_s, {"input_dim": 512, "classes": 512}),
    "fcn-r": Entry(zoo.fcn_r),
    "alexnet-r": Entry(zoo.alexnet_r),
    "resnet-56": Entry(zoo.resnet_56, {"image_size": 16}),
    "resnet-50": Entry(zoo.resnet_50, {"image_size": 64, "classes": 10}),
    "resnet-50-cifar": Entry(zoo.resnet_50_cifar, {"image_size": 16}),
    "lstm-ptb": Entry(zoo.lstm_ptb, {"vocab": 300, "seq_len": 8}),
    # transformers: the small forms keep every kind of layer, with 2 blocks at width 32-48
    "bert-base": Entry(zoo.bert_base, {"seq_len": 12, "vocab": 64, "dim": 32, "layers": 2, "heads": 4,
                                       "max_positions": 16, "classes": 3}),
    "gpt2": Entry(zoo.gpt2, {"seq_len": 8, "vocab": 64, "dim": 32, "layers": 2, "heads": 4, "max_positions": 16}),
    "vit-b16": Entry(zoo.vit_b16, {"image_size": 16, "patch": 4, "dim": 32, "layers": 2, "heads": 4,
                                   "classes": 10}),
    "smollm2-135m": Entry(zoo.smollm2_135m, {"seq_len": 8, "vocab": 64, "dim": 48, "layers": 2, "heads": 6,
                                             "kv_heads": 2, "head_dim": 8, "hidden": 64}),
    # probes (dlbench probe): one operation each
    "gemm": Entry(zoo.gemm, {"inputs": 64, "units": 32}),
    "conv": Entry(zoo.conv, {"image_size": 8, "channels": 8}),
    "dense-1": Entry(zoo.dense_1),
}


def list_models() -> list[str]:
    return list(REGISTRY)


def _coerce(value: str, default: object, key: str, name: str) -> object:
    try:
        if isinstance(default, bool):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise UnknownModelError(f"model {name}: option {key}={value!r} is not a {type(default).__name__}") from None
    return value


def parse_model_ref(ref: str) -> tuple[str, dict]:
    """``alexnet:lrn=0`` -> ("alexnet", {"lrn": False}); a part's reference (``alexnet:lrn=0#2``) is
    read as its model's."""
    try:
        whole, _ = split.parse_part(ref.strip())
    except ValueError as exc:
        raise UnknownModelError(str(exc)) from None
    if hf_checkpoint.is_hf(whole):
        try:
            folder, options = hf_checkpoint.parse(whole)
        except hf_checkpoint.CheckpointError as exc:
            raise UnknownModelError(str(exc)) from None
        return f"{hf_checkpoint.PREFIX}{folder}", options
    name, *opts = whole.split(":")
    if name not in REGISTRY:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(REGISTRY)}")
    params = inspect.signature(REGISTRY[name].factory).parameters
    kwargs: dict = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in params:
            known = ", ".join(params)
            raise UnknownModelError(f"model {name}: bad option {opt!r} (options: {known})")
        kwargs[key] = _coerce(value, params[key].default, key, name)
    return name, kwargs


#: options that size a model's input: its small form (the gate's) keeps its own, whatever the reference says
GATE_SIZES = ("seq_len", "image_size")


def get_model(ref: str, small: bool = False, **overrides) -> ModelSpec:
    """The spec for a model reference (``MODEL[:option=value...][#PART]``, a part as
    :mod:`dlbench.models.split` defines it). ``small`` uses the gate's reduced input size."""
    whole, index = split.parse_part(ref)
    if index is not None:
        full = split.split(get_model(whole, False, **overrides))
        if index >= len(full):
            raise UnknownModelError(f"model {ref}: {whole} has {len(full)} part(s), 0 to {len(full) - 1}")
        if not small:
            return full[index].spec
        parts = split.split(get_model(whole, True, **overrides))
        # a transformer's small form has fewer blocks: part k's gate form is the small part of the same kind
        k = index if len(parts) == len(full) else split.counterpart(full, parts, index)
        return replace(parts[k].spec, name=full[index].spec.name, description=full[index].spec.description)
    if hf_checkpoint.is_hf(ref):
        try:
            return hf_checkpoint.spec(ref, small, **overrides)
        except hf_checkpoint.CheckpointError as exc:
            raise UnknownModelError(str(exc)) from None
    name, kwargs = parse_model_ref(ref)
    entry = REGISTRY[name]
    defaults = {k: p.default for k, p in inspect.signature(entry.factory).parameters.items()}
    # the gate's form keeps its own input size: `gpt2:seq_len=64` (or bert-base's MLPerf 384) is gated
    # at the small form's sequence, which its small position table holds (the caller's overrides still win)
    user = {k: v for k, v in kwargs.items() if not (small and k in GATE_SIZES and k in entry.small)}
    options = {**user, **overrides}
    try:
        spec = entry.factory(**({**entry.small, **options} if small else options))
    except (TypeError, ValueError) as exc:
        raise UnknownModelError(f"model {ref}: {exc}") from None
    suffix = "".join(f":{k}={_fmt(v)}" for k, v in sorted(kwargs.items()) if v != defaults[k])
    return replace(spec, name=spec.name + suffix)


def canonical_ref(ref: str) -> str:
    """The reference every process of a run receives: a zoo model's as written; a Hugging Face folder's
    with its absolute path and its files' digest (:func:`dlbench.models.hf_checkpoint.canonical`)."""
    whole, index = split.parse_part(ref.strip())
    if not hf_checkpoint.is_hf(whole):
        return ref
    try:
        canon = hf_checkpoint.canonical(whole)
    except hf_checkpoint.CheckpointError as exc:
        raise UnknownModelError(str(exc)) from None
    return canon if index is None else split.part_ref(canon, index)


def gate_form(ref: str, form: Mapping[str, object]) -> dict:
    """Of ``form`` (sizes a framework's kernels need in the gate's small form, such as ONNX Runtime GenAI's
    head size, a multiple of 16), those ``ref``'s small form takes: options of a zoo model's factory that
    the reference does not set itself; none for a checkpoint, whose shapes are its own."""
    if not form or hf_checkpoint.is_hf(split.parse_part(ref)[0]):
        return {}
    name, kwargs = parse_model_ref(ref)
    params = inspect.signature(REGISTRY[name].factory).parameters
    return {k: v for k, v in form.items() if k in params and k not in kwargs}


def verify_spec(ref: str, form: Mapping[str, object] | None = None) -> ModelSpec:
    """The small-input spec the equivalence gate checks; ``form``: what the framework's kernels need of it
    (:func:`gate_form`)."""
    return get_model(ref, small=True, **gate_form(ref, form or {}))


def _fmt(v: object) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)
