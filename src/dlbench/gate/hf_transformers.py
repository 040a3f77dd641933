"""dlbench's transformers as Hugging Face ``transformers`` builds them: the fidelity check and the speed
comparison against the implementation people run (imports torch and transformers).

For a dlbench spec (bert-base, gpt2, vit-b16, smollm2-135m, any size), :func:`hf_model` makes the
matching ``transformers`` class from a config written here (no hub access): ``BertForSequenceClassification``,
``GPT2LMHeadModel``, ``ViTForImageClassification`` and ``LlamaForCausalLM``, dropout off, eval mode,
and loads dlbench's canonical weights into it, every parameter of the Hugging Face model set from
exactly one canonical array (a parameter left over or unset is an error). :func:`hf_logits` runs it on
a dlbench batch. The layouts: Hugging Face's ``nn.Linear`` weights are (out, in), the canonical ones
(in, out); GPT-2's ``Conv1D`` is (in, out) with q, k, v side by side in ``c_attn``; ViT's class
token and positions carry a leading (1, 1) / (1,) axis.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import transformers

from dlbench.data.synthetic import Batch
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the dlbench models with a Hugging Face counterpart, by base name
FAMILIES = ("bert-base", "gpt2", "vit-b16", "smollm2-135m")


def family(spec: ModelSpec) -> str:
    base = spec.name.split(":")[0]
    if base not in FAMILIES:
        raise ValueError(f"{spec.name} has no Hugging Face transformers counterpart (known: {', '.join(FAMILIES)})")
    return base


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
    if fam == "gpt2":
        vocab, positions = dims["wte"][0], dims["wpe"][0]
        return transformers.GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers,
                                       n_head=heads, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    if fam == "bert-base":
        fc = _named(_blocks(spec)[1], L.Dense)
        return transformers.BertConfig(vocab_size=dims["word"][0], hidden_size=width, num_hidden_layers=layers,
                                       num_attention_heads=heads, intermediate_size=fc.units,
                                       max_position_embeddings=dims["position"][0], type_vocab_size=2,
                                       layer_norm_eps=1e-12, hidden_act="gelu", hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, num_labels=spec.input.classes)
    if fam == "vit-b16":
        patch = _first(spec, L.PatchEmbed)
        fc = _named(_blocks(spec)[1], L.Dense)
        return transformers.ViTConfig(image_size=spec.input.shape[1], patch_size=patch.patch,
                                      num_channels=spec.input.shape[0], hidden_size=width, num_hidden_layers=layers,
                                      num_attention_heads=heads, intermediate_size=fc.units, hidden_act="gelu",
                                      layer_norm_eps=1e-12, qkv_bias=True, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, num_labels=spec.input.classes)
    mlp, norm = _first(spec, L.SwiGLU), _first(spec, L.RMSNorm)
    return transformers.LlamaConfig(vocab_size=dims["embed"][0], hidden_size=width, intermediate_size=mlp.hidden,
                                    num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                    head_dim=hd, rms_norm_eps=norm.eps, rope_theta=attn.rope_theta,
                                    max_position_embeddings=max(2048, spec.input.shape[0]), attention_bias=False,
                                    mlp_bias=False, hidden_act="silu", tie_word_embeddings=True, attention_dropout=0.0)


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


def _linear(hf: str, canonical_w: str, canonical_b: str | None, p: dict) -> dict[str, np.ndarray]:
    out = {f"{hf}.weight": p[canonical_w].T}
    if canonical_b:
        out[f"{hf}.bias"] = p[canonical_b]
    return out


def hf_state(spec: ModelSpec, weights: Weights, vit_v5: bool = True) -> dict[str, np.ndarray]:
    """Every Hugging Face parameter (tied ones once, by the name ``named_parameters`` gives) from the
    canonical weights. ``vit_v5``: ViT's module names as transformers 5 has them (``vit.layers.N.attention.q_proj``),
    else as 4.x (``vit.encoder.layer.N.attention.attention.query``)."""
    p, fam = weights.params, family(spec)
    out: dict[str, np.ndarray] = {}
    pairs = _attention_blocks(spec)
    if fam == "gpt2":
        out.update({"transformer.wte.weight": p["wte.weight"], "transformer.wpe.weight": p["wpe.weight"],
                    "transformer.ln_f.weight": p["ln_f.weight"], "transformer.ln_f.bias": p["ln_f.bias"]})
        for i in range(len(pairs)):
            h, c = f"transformer.h.{i}", f"h{i}"
            out.update({
                f"{h}.ln_1.weight": p[f"{c}.ln1.weight"], f"{h}.ln_1.bias": p[f"{c}.ln1.bias"],
                f"{h}.attn.c_attn.weight": np.concatenate([p[f"{c}.attn.w{x}"] for x in "qkv"], axis=1),
                f"{h}.attn.c_attn.bias": np.concatenate([p[f"{c}.attn.b{x}"] for x in "qkv"]),
                f"{h}.attn.c_proj.weight": p[f"{c}.attn.wo"], f"{h}.attn.c_proj.bias": p[f"{c}.attn.bo"],
                f"{h}.ln_2.weight": p[f"{c}.ln2.weight"], f"{h}.ln_2.bias": p[f"{c}.ln2.bias"],
                f"{h}.mlp.c_fc.weight": p[f"{c}.mlp.fc.weight"], f"{h}.mlp.c_fc.bias": p[f"{c}.mlp.fc.bias"],
                f"{h}.mlp.c_proj.weight": p[f"{c}.mlp.proj.weight"], f"{h}.mlp.c_proj.bias": p[f"{c}.mlp.proj.bias"]})
    elif fam == "bert-base":
        e = "bert.embeddings"
        out.update({f"{e}.word_embeddings.weight": p["word.weight"], f"{e}.position_embeddings.weight":
                    p["position.weight"], f"{e}.token_type_embeddings.weight": p["token_type.weight"],
                    f"{e}.LayerNorm.weight": p["embed_ln.weight"], f"{e}.LayerNorm.bias": p["embed_ln.bias"],
                    **_linear("bert.pooler.dense", "pooler.weight", "pooler.bias", p),
                    **_linear("classifier", "classifier.weight", "classifier.bias", p)})
        for i in range(len(pairs)):
            h, c = f"bert.encoder.layer.{i}", f"l{i}"
            for hf, x in (("query", "q"), ("key", "k"), ("value", "v")):
                out.update(_linear(f"{h}.attention.self.{hf}", f"{c}.attn.w{x}", f"{c}.attn.b{x}", p))
            out.update({**_linear(f"{h}.attention.output.dense", f"{c}.attn.wo", f"{c}.attn.bo", p),
                        f"{h}.attention.output.LayerNorm.weight": p[f"{c}.attn_ln.weight"],
                        f"{h}.attention.output.LayerNorm.bias": p[f"{c}.attn_ln.bias"],
                        **_linear(f"{h}.intermediate.dense", f"{c}.mlp.fc.weight", f"{c}.mlp.fc.bias", p),
                        **_linear(f"{h}.output.dense", f"{c}.mlp.proj.weight", f"{c}.mlp.proj.bias", p),
                        f"{h}.output.LayerNorm.weight": p[f"{c}.mlp_ln.weight"],
                        f"{h}.output.LayerNorm.bias": p[f"{c}.mlp_ln.bias"]})
    elif fam == "vit-b16":
        e = "vit.embeddings"
        out.update({f"{e}.cls_token": p["patch.cls"][None, None], f"{e}.position_embeddings": p["position.weight"][None],
                    f"{e}.patch_embeddings.projection.weight": p["patch.weight"],
                    f"{e}.patch_embeddings.projection.bias": p["patch.bias"],
                    "vit.layernorm.weight": p["ln.weight"], "vit.layernorm.bias": p["ln.bias"],
                    **_linear("classifier", "head.weight", "head.bias", p)})
        for i in range(len(pairs)):
            c = f"l{i}"
            if vit_v5:  # transformers 5 renamed ViT's modules
                h = f"vit.layers.{i}"
                names = {x: f"{h}.attention.{x}_proj" for x in "qkvo"} | {"fc": f"{h}.mlp.fc1", "proj": f"{h}.mlp.fc2"}
            else:
                h = f"vit.encoder.layer.{i}"
                names = {x: f"{h}.attention.attention.{hf}" for x, hf in (("q", "query"), ("k", "key"), ("v", "value"))}
                names |= {"o": f"{h}.attention.output.dense", "fc": f"{h}.intermediate.dense",
                          "proj": f"{h}.output.dense"}
            for x in "qkvo":
                out.update(_linear(names[x], f"{c}.attn.w{x}", f"{c}.attn.b{x}", p))
            out.update({f"{h}.layernorm_before.weight": p[f"{c}.ln1.weight"],
                        f"{h}.layernorm_before.bias": p[f"{c}.ln1.bias"],
                        f"{h}.layernorm_after.weight": p[f"{c}.ln2.weight"],
                        f"{h}.layernorm_after.bias": p[f"{c}.ln2.bias"],
                        **_linear(names["fc"], f"{c}.mlp.fc.weight", f"{c}.mlp.fc.bias", p),
                        **_linear(names["proj"], f"{c}.mlp.proj.weight", f"{c}.mlp.proj.bias", p)})
    else:
        out.update({"model.embed_tokens.weight": p["embed.weight"], "model.norm.weight": p["norm.weight"]})
        for i in range(len(pairs)):
            h, c = f"model.layers.{i}", f"l{i}"
            out.update({f"{h}.input_layernorm.weight": p[f"{c}.attn_norm.weight"],
                        f"{h}.post_attention_layernorm.weight": p[f"{c}.mlp_norm.weight"]})
            for x in "qkvo":
                out.update(_linear(f"{h}.self_attn.{x}_proj", f"{c}.attn.w{x}", None, p))
            for hf, leaf in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down")):
                out.update(_linear(f"{h}.mlp.{hf}", f"{c}.mlp.{leaf}", None, p))
    return out


CLASSES: dict[str, Callable[[transformers.PretrainedConfig], torch.nn.Module]] = {
    "gpt2": transformers.GPT2LMHeadModel, "bert-base": transformers.BertForSequenceClassification,
    "vit-b16": transformers.ViTForImageClassification, "smollm2-135m": transformers.LlamaForCausalLM}


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
