"""dlbench's transformers as Hugging Face ``transformers`` builds them: the fidelity check and the speed
comparison against the implementation people run (imports torch and transformers).

For a dlbench spec (bert-base, gpt2, vit-b16, smollm2-135m, any size), :func:`hf_model` makes the
matching ``transformers`` class from a config written here (no hub access): ``BertForSequenceClassification``,
``GPT2LMHeadModel``, ``ViTForImageClassification`` and ``LlamaForCausalLM``, dropout off, eval mode,
and loads dlbench's canonical weights into it, every parameter of the Hugging Face model set from
exactly one canonical array (a parameter left over or unset is an error). :func:`hf_logits` runs it on
a dlbench batch; :func:`save_folder` writes the model as a Hugging Face folder (``dlbench export-model``).
The layouts are :mod:`dlbench.models.hf_layout`'s table, the one ``hf:DIR`` reads folders by.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers

from dlbench.data.synthetic import Batch
from dlbench.models import layers as L
from dlbench.models.hf_layout import ZOO_FAMILIES, family_of, to_hf
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the dlbench models with a Hugging Face counterpart, by base name
FAMILIES = tuple(ZOO_FAMILIES)


def family(spec: ModelSpec) -> str:
    """The Hugging Face family of ``spec`` (gpt2, llama, qwen2, bert, vit: :func:`family_of`)."""
    return family_of(spec)


def _blocks(spec: ModelSpec) -> list[L.SkipBlock]:
    return [layer for layer in spec.layers if isinstance(layer, L.SkipBlock)]


def _first(spec: ModelSpec, kind: type) -> L.Layer:
    return next(layer for layer in L.walk(spec.layers) if isinstance(layer, kind))


def _attention_blocks(spec: ModelSpec) -> list[tuple[L.SkipBlock, L.SkipBlock]]:
    blocks = _blocks(spec)
    return list(zip(blocks[::2], blocks[1::2], strict=True))


def _named(block: L.SkipBlock, kind: type) -> L.Layer:
    return next(layer for layer in L.walk((block,)) if isinstance(layer, kind))


def config(spec: ModelSpec) -> transformers.PretrainedConfig:
    """The Hugging Face config of ``spec``'s shapes, dropout off."""
    fam = family(spec)
    attn = _first(spec, L.Attention)
    dims = {layer.name: shape for layer in spec.layers for name, shape in spec.param_shapes().items()
            if isinstance(layer, L.Embedding | L.PositionEmbedding) and name == f"{layer.name}.weight"}
    width = next(iter(dims.values()))[1] if dims else _first(spec, L.PatchEmbed).dim
    heads, kv, hd = attn.dims(width)
    layers = len(_blocks(spec)) // 2
    tied = isinstance(spec.layers[-1], L.LMHead)
    if fam in ("gpt2", "bert", "vit"):
        fc, gelu, norm = _named(_blocks(spec)[1], L.Dense), _first(spec, L.GELU), _first(spec, L.LayerNorm)
        act = {"none": "gelu", "tanh": "gelu_new"}[gelu.approximate]
    if fam == "gpt2":
        vocab, positions = dims["wte"][0], dims["wpe"][0]
        return transformers.GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers,
                                       n_head=heads, n_inner=fc.units, activation_function=act,
                                       layer_norm_epsilon=norm.eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                       tie_word_embeddings=tied, bos_token_id=min(50256, vocab - 1),
                                       eos_token_id=min(50256, vocab - 1))
    if fam == "bert":
        types = spec.param_shapes()["token_type.weight"][0]
        return transformers.BertConfig(vocab_size=dims["word"][0], hidden_size=width, num_hidden_layers=layers,
                                       num_attention_heads=heads, intermediate_size=fc.units,
                                       max_position_embeddings=dims["position"][0], type_vocab_size=types,
                                       layer_norm_eps=norm.eps, hidden_act=act, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, num_labels=spec.input.classes)
    if fam == "vit":
        patch = _first(spec, L.PatchEmbed)
        return transformers.ViTConfig(image_size=spec.input.shape[1], patch_size=patch.patch,
                                      num_channels=spec.input.shape[0], hidden_size=width, num_hidden_layers=layers,
                                      num_attention_heads=heads, intermediate_size=fc.units, hidden_act=act,
                                      layer_norm_eps=norm.eps, qkv_bias=True, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, num_labels=spec.input.classes)
    if fam != "llama":
        raise ValueError(f"{spec.name}: no Hugging Face config is written here for the {fam} family")
    mlp, norm = _first(spec, L.SwiGLU), _first(spec, L.RMSNorm)
    return transformers.LlamaConfig(vocab_size=dims["embed"][0], hidden_size=width, intermediate_size=mlp.hidden,
                                    num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                    head_dim=hd, rms_norm_eps=norm.eps, rope_theta=attn.rope_theta,
                                    max_position_embeddings=spec.options.get("context", max(2048, spec.input.shape[0])),
                                    attention_bias=attn.bias, mlp_bias=False, hidden_act="silu",
                                    tie_word_embeddings=tied, attention_dropout=0.0)


def hf_state(spec: ModelSpec, weights: Weights, vit_v5: bool = True) -> dict[str, np.ndarray]:
    """Every Hugging Face parameter (tied ones once, by the name ``named_parameters`` gives) from the
    canonical weights, by the table :func:`dlbench.models.hf_layout.layout` (the one ``hf:DIR`` reads
    folders with). ``vit_v5``: ViT's module names as transformers 5 has them (``vit.layers.N.attention.q_proj``),
    else as 4.x (``vit.encoder.layer.N.attention.attention.query``)."""
    return to_hf(spec, weights.params, vit_v5)


CLASSES: dict[str, Callable[[transformers.PretrainedConfig], torch.nn.Module]] = {
    "gpt2": transformers.GPT2LMHeadModel, "bert": transformers.BertForSequenceClassification,
    "vit": transformers.ViTForImageClassification, "llama": transformers.LlamaForCausalLM}


def hf_model(spec: ModelSpec, weights: Weights, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """The Hugging Face model of ``spec`` holding ``weights``, eval mode, float32."""
    cfg = config(spec)
    cfg._attn_implementation = attn_implementation
    model = CLASSES[family(spec)](cfg).eval()
    named = dict(model.named_parameters())
    state = hf_state(spec, weights, vit_v5=any(n.startswith("vit.layers.") for n in named))
    if set(named) != set(state):
        raise ValueError(f"Hugging Face parameters unset: {sorted(set(named) - set(state))[:4]}; "
                         f"canonical ones unused: {sorted(set(state) - set(named))[:4]}")
    with torch.no_grad():
        for name, tensor in named.items():
            value = torch.from_numpy(np.ascontiguousarray(state[name], np.float32))
            if tuple(value.shape) != tuple(tensor.shape):
                raise ValueError(f"{name}: canonical gives {tuple(value.shape)}, Hugging Face has {tuple(tensor.shape)}")
            tensor.copy_(value)
    return model


def save_folder(spec: ModelSpec, weights: Weights, folder: str | Path) -> list[str]:
    """Write ``spec`` with ``weights`` as a Hugging Face folder (``config.json``, ``model.safetensors``,
    what ``save_pretrained`` writes beside them), which ``transformers`` and ``hf:DIR`` read back; the
    names of the files written."""
    model = hf_model(spec, weights, "eager")
    model.save_pretrained(str(folder))
    return sorted(p.name for p in Path(folder).iterdir())


def hf_inputs(spec: ModelSpec, batch: Batch) -> dict[str, torch.Tensor]:
    """The batch as the Hugging Face model's keyword arguments."""
    if spec.input.kind == "image":
        return {"pixel_values": torch.from_numpy(np.ascontiguousarray(batch.x))}
    inputs = {"input_ids": torch.from_numpy(batch.x)}
    if batch.mask is not None:
        inputs["attention_mask"] = torch.from_numpy(batch.mask.astype(np.int64))
    return inputs


def hf_logits(model: torch.nn.Module, spec: ModelSpec, batch: Batch) -> np.ndarray:
    with torch.inference_mode():
        return model(**hf_inputs(spec, batch)).logits.float().numpy()
