"""Hugging Face folders as dlbench models: ``hf:DIR`` (``config.json`` and ``*.safetensors``).

A folder of a supported family (GPT-2, Llama, Qwen2, BERT for sequence classification, ViT for image
classification) becomes the zoo's spec of that family (:mod:`dlbench.models.zoo`, the same layers and
canonical names) sized by its config, and its tensors become the canonical weights. A config field
dlbench cannot honour is refused by name (:class:`CheckpointError`), never guessed.

NumPy only, by design: every measuring process rebuilds the weights from the reference, and an
environment framework's interpreter has only NumPy and dlbench. Its safetensors files are read
by :mod:`dlbench.models.safetensors_file`, its tensors mapped by the table of :mod:`dlbench.models.hf_layout`
(the one ``export-model`` writes folders by).

A reference names the folder and, once resolved (:func:`canonical`), the digest of its files:
``hf:/abs/dir:sha256=0123456789abcdef:layers=2``. A process that receives it reads the same folder,
and a folder changed since the run was planned is refused rather than measured under the old name.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.models.hf_layout import ZOO_FAMILIES, family_of, from_hf, layout, to_hf
from dlbench.models.hf_layout import blocks as blocks_of
from dlbench.models.safetensors_file import SafetensorsError, tensors
from dlbench.models.spec import ModelSpec
from dlbench.models.zoo import bert_base, gpt2, smollm2_135m, vit_b16

__all__ = ["CheckpointError", "ZOO_FAMILIES", "canonical", "digest", "family_of", "is_hf", "layout", "load_params",
           "parse", "source", "spec", "to_hf"]

PREFIX = "hf:"
CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
#: model_type -> the zoo factory whose layers the family has
FAMILIES = {"gpt2": gpt2, "llama": smollm2_135m, "qwen2": smollm2_135m, "bert": bert_base, "vit": vit_b16}
#: options an ``hf:`` reference takes: fewer blocks, another sequence length, the files' digest
OPTIONS = ("layers", "seq_len", "sha256")
#: the sequence a token model gets by default (the zoo's), at most its positions; the gate's (small) one
DEFAULT_SEQ = {"gpt2": 256, "llama": 256, "qwen2": 256, "bert": 128}
SMALL_SEQ = {"gpt2": 8, "llama": 8, "qwen2": 8, "bert": 12}
#: tensors a checkpoint may hold that are buffers, not parameters (recomputed from the config)
BUFFERS = ("position_ids", "rotary_emb.inv_freq", "attn.bias", "attn.masked_bias")
GELU = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
DIGEST_CHARS = 16


class CheckpointError(ValueError):
    """A folder dlbench cannot read as a model, or a field it cannot honour (one line, for a usage error)."""


# --- references ---------------------------------------------------------------------------------------
def is_hf(ref: str) -> bool:
    return ref.strip().startswith(PREFIX)


def parse(ref: str) -> tuple[Path, dict[str, Any]]:
    """``hf:DIR[:option=value...]`` -> (DIR, options); options as :data:`OPTIONS` say (ints, the digest)."""
    body = ref.strip()[len(PREFIX):]
    path, *opts = body.split(":")
    if not path:
        raise CheckpointError("hf: names no folder (hf:DIR, a Hugging Face folder with config.json and safetensors)")
    options: dict[str, Any] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in OPTIONS:
            raise CheckpointError(f"model {ref}: bad option {opt!r} (options: {', '.join(OPTIONS)}; "
                                  "a folder's path may hold no ':')")
        if key == "sha256":
            if len(value) != DIGEST_CHARS or any(c not in "0123456789abcdef" for c in value):
                raise CheckpointError(f"model {ref}: sha256 must be {DIGEST_CHARS} lower-case hex digits, got {value!r}")
            options[key] = value
        else:
            try:
                options[key] = int(value)
            except ValueError:
                raise CheckpointError(f"model {ref}: option {key}={value!r} is not an int") from None
    return Path(path), options


def reference(folder: Path, options: dict[str, Any]) -> str:
    """The reference of ``folder`` with ``options``: the digest first, the others sorted."""
    rest = "".join(f":{k}={options[k]}" for k in sorted(options) if k != "sha256")
    return f"{PREFIX}{folder}" + (f":sha256={options['sha256']}" if "sha256" in options else "") + rest


def canonical(ref: str) -> str:
    """The reference every process of a run receives: the folder as an absolute path, the digest of its
    files added (or checked, where the reference has one: a folder changed since is refused), and the
    config checked (a field dlbench cannot honour is refused here, before anything is measured)."""
    folder, options = parse(ref)
    folder = folder.expanduser().resolve()
    read_config(folder)  # the folder and its config first: what is missing is said before what it would hold
    found = digest(folder)
    if options.get("sha256", found) != found:
        raise CheckpointError(f"{folder}: its files changed since the reference was made "
                              f"(sha256 {options['sha256']}, now {found}); name the folder again to measure it")
    options["sha256"] = found
    canon = reference(folder, options)
    spec(canon)
    return canon


# --- the folder's files -------------------------------------------------------------------------------
def read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG
    if not folder.is_dir():
        raise CheckpointError(f"hf:{folder}: no such folder (a Hugging Face folder with {CONFIG} and safetensors)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"hf:{folder}: no {CONFIG} (a Hugging Face folder has one)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"hf:{folder}: cannot read {CONFIG}: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"hf:{folder}: {CONFIG} is not a JSON object")
    return config


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files holding the weights: those ``model.safetensors.index.json`` maps (sharded),
    else ``model.safetensors``."""
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"hf:{folder}: {INDEX} is not a safetensors index ({exc})") from None
        bad = [n for n in names if not isinstance(n, str) or Path(n).name != n]
        if bad:
            raise CheckpointError(f"hf:{folder}: {INDEX} names files outside the folder: {bad[:2]}")
        return [folder / n for n in names]
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.safetensors"))
    raise CheckpointError(f"hf:{folder}: no {SINGLE} and no {INDEX}" +
                          (f" (found {', '.join(others[:3])}; dlbench reads safetensors only)" if others else ""))


def _stat_key(folder: Path) -> tuple:
    files = [folder / CONFIG, *weight_files(folder)]
    try:
        return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    except OSError as exc:
        raise CheckpointError(f"hf:{folder}: cannot read {exc.filename}: {exc.strerror}") from None


def digest(folder: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the config and the weights files (names and bytes)."""
    return _digest(_stat_key(folder))


@lru_cache(maxsize=16)
def _digest(key: tuple) -> str:  # cached by path, size and modification time: a run resolves a reference often
    h = hashlib.sha256()
    for path, _, _ in key:
        h.update(Path(path).name.encode() + b"\0")
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
        except OSError as exc:
            raise CheckpointError(f"cannot read {path}: {exc.strerror}") from None
    return h.hexdigest()[:DIGEST_CHARS]


# --- config -> spec -----------------------------------------------------------------------------------
def _get(config: dict, key: str, default: Any = None) -> Any:
    return config.get(key, default) if config.get(key) is not None else default


def _refuse(folder: Path, field: str, value: Any, supported: str) -> CheckpointError:
    return CheckpointError(f"hf:{folder}: config.json {field}={json.dumps(value)} is not supported "
                           f"(dlbench supports {supported})")


def _require(folder: Path, config: dict, field: str, allowed: tuple, default: Any) -> Any:
    value = config.get(field, default)
    if value not in allowed:
        raise _refuse(folder, field, value, " or ".join(json.dumps(a) for a in allowed))
    return value


def _gelu(folder: Path, config: dict, field: str, default: str) -> str:
    act = config.get(field, default)
    if act not in GELU:
        raise _refuse(folder, field, act, f"{', '.join(GELU)}")
    return GELU[act]


def _rope_theta(folder: Path, config: dict) -> float:
    """RoPE's base from ``rope_parameters`` (transformers 5) or ``rope_theta``; any scaling is refused
    (dlbench's rotary embedding is the plain one)."""
    params = config.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise _refuse(folder, "rope_parameters", params, "an object with rope_type default")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise _refuse(folder, "rope_parameters.rope_type", kind, '"default" (no RoPE scaling)')
    scaling = config.get("rope_scaling")
    if scaling not in (None, {}):
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind != "default":
            raise _refuse(folder, "rope_scaling", scaling, 'null or rope_type "default" (no RoPE scaling)')
    if params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) != 1.0:
        raise _refuse(folder, "partial_rotary_factor", config.get("partial_rotary_factor",
                                                                   params.get("partial_rotary_factor")), "1.0")
    return float(params.get("rope_theta", _get(config, "rope_theta", 10000.0)))


def _classes(config: dict) -> int:
    labels = config.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else int(_get(config, "num_labels", 2))


def _architecture(folder: Path, config: dict, wanted: str) -> None:
    arch = config.get("architectures")
    if arch is not None and wanted not in (arch or []):
        raise _refuse(folder, "architectures", arch, f'["{wanted}"]')


def family_kwargs(folder: Path, config: dict) -> tuple[str, dict[str, Any]]:
    """The family and its zoo factory's arguments for a config; a field dlbench cannot honour is refused."""
    fam = config.get("model_type")
    if fam not in FAMILIES:
        raise _refuse(folder, "model_type", fam, ", ".join(FAMILIES))
    for field in ("add_cross_attention", "is_encoder_decoder"):
        if config.get(field):
            raise _refuse(folder, field, config[field], "false (no cross-attention)")
    if fam == "gpt2":
        _require(folder, config, "scale_attn_weights", (True,), True)
        _require(folder, config, "scale_attn_by_inverse_layer_idx", (False,), False)
        return fam, {"vocab": config["vocab_size"], "dim": config["n_embd"], "layers": config["n_layer"],
                     "heads": config["n_head"], "max_positions": _get(config, "n_positions", 1024),
                     "hidden": _get(config, "n_inner", 0), "eps": float(_get(config, "layer_norm_epsilon", 1e-5)),
                     "gelu": _gelu(folder, config, "activation_function", "gelu_new"),
                     "tied": bool(_get(config, "tie_word_embeddings", True))}
    if fam in ("llama", "qwen2"):
        _require(folder, config, "hidden_act", ("silu",), "silu")
        if fam == "llama":
            _require(folder, config, "mlp_bias", (False,), False)
        else:
            _require(folder, config, "use_sliding_window", (False,), False)
            types = config.get("layer_types") or []
            if any(t != "full_attention" for t in types):
                raise _refuse(folder, "layer_types", types, '"full_attention" only (no sliding window)')
        heads = config["num_attention_heads"]
        return fam, {"vocab": config["vocab_size"], "dim": config["hidden_size"],
                     "layers": config["num_hidden_layers"], "heads": heads,
                     "kv_heads": _get(config, "num_key_value_heads", heads),
                     "head_dim": _get(config, "head_dim", config["hidden_size"] // heads),
                     "hidden": config["intermediate_size"], "rope_theta": _rope_theta(folder, config),
                     "eps": float(_get(config, "rms_norm_eps", 1e-6)),
                     "max_positions": _get(config, "max_position_embeddings", 2048),
                     "tied": bool(_get(config, "tie_word_embeddings", False)),
                     # Qwen2's q, k and v carry biases; its output projection's is zero (:func:`layout`)
                     "bias": fam == "qwen2" or bool(_get(config, "attention_bias", False))}
    if fam == "bert":
        _architecture(folder, config, "BertForSequenceClassification")
        _require(folder, config, "position_embedding_type", ("absolute",), "absolute")
        _require(folder, config, "is_decoder", (False,), False)
        return fam, {"vocab": config["vocab_size"], "dim": config["hidden_size"],
                     "layers": config["num_hidden_layers"], "heads": config["num_attention_heads"],
                     "max_positions": _get(config, "max_position_embeddings", 512), "classes": _classes(config),
                     "hidden": config["intermediate_size"], "eps": float(_get(config, "layer_norm_eps", 1e-12)),
                     "gelu": _gelu(folder, config, "hidden_act", "gelu"), "types": _get(config, "type_vocab_size", 2)}
    _architecture(folder, config, "ViTForImageClassification")
    _require(folder, config, "qkv_bias", (True,), True)
    return fam, {"image_size": config.get("image_size", 224), "patch": config.get("patch_size", 16),
                 "dim": config["hidden_size"], "layers": config["num_hidden_layers"],
                 "heads": config["num_attention_heads"], "classes": _classes(config),
                 "hidden": config["intermediate_size"], "eps": float(_get(config, "layer_norm_eps", 1e-12)),
                 "gelu": _gelu(folder, config, "hidden_act", "gelu"), "channels": config.get("num_channels", 3)}


def spec(ref: str, small: bool = False, **overrides: Any) -> ModelSpec:
    """The spec of an ``hf:`` reference: the family's zoo layers sized by the folder's config, fewer
    blocks with ``layers``, another sequence with ``seq_len`` (token models); ``small`` is the gate's
    form (a short sequence, the same weights). ``options["checkpoint"]`` tells
    :func:`dlbench.models.weights.init_weights` to read the weights from the folder."""
    folder, options = parse(ref)
    config = read_config(folder)
    try:
        fam, kwargs = family_kwargs(folder, config)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"hf:{folder}: config.json holds a value of the wrong type ({exc})") from None
    except KeyError as exc:
        raise CheckpointError(f"hf:{folder}: config.json has no {exc.args[0]} (a {config.get('model_type')} "
                              "config names it)") from None
    blocks = kwargs["layers"]
    layers = options.get("layers", blocks)
    if not 1 <= layers <= blocks:
        raise CheckpointError(f"model {ref}: layers={layers} must be 1 to the checkpoint's {blocks}")
    kwargs["layers"] = layers
    if fam in DEFAULT_SEQ:
        kwargs["seq_len"] = min(DEFAULT_SEQ[fam], kwargs["max_positions"])
        if small:
            kwargs["seq_len"] = min(SMALL_SEQ[fam], kwargs["max_positions"])
        elif "seq_len" in options:
            kwargs["seq_len"] = options["seq_len"]
    elif "seq_len" in options:
        raise CheckpointError(f"model {ref}: seq_len is an option of token models; {fam} takes images")
    kwargs.update(overrides)
    try:
        base = FAMILIES[fam](**kwargs)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"model {ref}: {exc}") from None
    name = str(config.get("_name_or_path") or folder.name)
    context = {"context": kwargs["max_positions"]} if fam in ("llama", "qwen2") else {}
    return replace(base, name=reference(folder, options), source=f"Hugging Face folder {folder}",
                   description=f"{name} ({fam}, Hugging Face folder)",
                   options={**context, "family": fam,
                            "checkpoint": {"dir": str(folder), "name": name, "sha256": options.get("sha256", ""),
                                                  "blocks": blocks}})


def source(ref: str) -> dict[str, str]:
    """What a stored cell records of its model's folder: its name, directory and digest (empty for a zoo model)."""
    if not is_hf(ref):
        return {}
    folder, options = parse(ref.split("#")[0])
    try:
        config = read_config(folder)
    except CheckpointError:  # gone since it was measured: the reference still says which folder it was
        config = {}
    return {"name": str(config.get("_name_or_path") or folder.name), "dir": str(folder),
            "sha256": options.get("sha256", "")}


def load_params(spec: ModelSpec) -> dict[str, np.ndarray]:
    """The canonical parameters of an ``hf:`` spec from its folder (every file's digest checked against
    the reference's, when it has one: a folder changed since the run was planned is refused)."""
    ckpt = spec.options["checkpoint"]
    folder = Path(ckpt["dir"])
    files = [folder / CONFIG, *weight_files(folder)]
    h = hashlib.sha256()
    state: dict[str, np.ndarray] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"hf:{folder}: cannot read {path.name}: {exc.strerror}") from None
        h.update(path.name.encode() + b"\0")
        h.update(data)
        if path.name != CONFIG:
            try:
                state.update(tensors(data, path))
            except SafetensorsError as exc:
                raise CheckpointError(str(exc)) from None
    found = h.hexdigest()[:DIGEST_CHARS]
    if ckpt["sha256"] and found != ckpt["sha256"]:
        raise CheckpointError(f"hf:{folder}: its files changed since the run was planned "
                              f"(sha256 {ckpt['sha256']}, now {found})")
    state = {_unprefixed(k): v for k, v in state.items()}
    try:
        params = from_hf(spec, state, f"hf:{folder}")
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    _check_leftovers(spec, state, params, folder)
    wanted = spec.param_shapes()
    return {k: v for k, v in params.items() if k in wanted}


def _unprefixed(name: str) -> str:
    """Old GPT-2 files (the hub's ``gpt2``) name the base model's tensors without ``transformer.``."""
    return f"transformer.{name}" if name.startswith(("h.", "wte.", "wpe.", "ln_f.")) else name


def _check_leftovers(spec: ModelSpec, state: dict[str, np.ndarray], params: dict, folder: Path) -> None:
    """A tensor the mapping does not use is refused (it would be a part of the model dlbench drops),
    except known buffers, blocks past ``layers=N``, and a tied head stored beside its embedding."""
    used = {hf for hf, _, how in layout(spec) if how != "zero"}
    blocks = spec.options["checkpoint"]["blocks"]  # the config's: those past layers=N are left unread
    for name in sorted(set(state) - used):
        index = _block_index(name)
        if name.endswith(BUFFERS) or (index is not None and blocks_of(spec) <= index < blocks):
            continue
        if name == "lm_head.weight" and "lm_head.weight" not in params:
            embed = next(n for n in ("transformer.wte.weight", "model.embed_tokens.weight") if n in state)
            if np.array_equal(state[name], state[embed]):
                continue
            raise CheckpointError(f"hf:{folder}: lm_head.weight differs from {embed} but config.json has "
                                  "tie_word_embeddings=true: which one is the head is not said")
        raise CheckpointError(f"hf:{folder}: tensor {name} has no place in a {family_of(spec)} model of this "
                              "config (a layer dlbench does not have)")


#: the segment before a block's index in Hugging Face tensor names (GPT-2 ``h.3``, BERT/ViT ``layer.3``,
#: Llama/Qwen2 ``layers.3``)
BLOCK_SEGMENTS = frozenset({"h", "layer", "layers"})


def _block_index(name: str) -> int | None:
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p in BLOCK_SEGMENTS and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


def export_path(folder: str | os.PathLike, force: bool) -> Path:
    """Where ``export-model`` may write: a new or empty folder, or (``force``) one to write over;
    never a file, or a link to one."""
    path = Path(folder)
    if path.is_symlink() and not path.is_dir():
        raise CheckpointError(f"{path} is a link to {os.readlink(path)}, not a folder")
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a folder")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise CheckpointError(f"{path} is not empty (--force writes the model's files into it)")
    return path
