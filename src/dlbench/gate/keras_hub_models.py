"""dlbench's decoder LMs as ``keras-hub`` builds them: the fidelity check and the speed comparison against
the Keras implementation people run (imports keras and keras_hub).

For a dlbench ``gpt2`` or ``smollm2-135m`` spec (any size), :func:`keras_hub_backbone` makes keras-hub's
``GPT2Backbone`` or ``LlamaBackbone`` of the same shapes (dropout 0, no preset: no hub access) and loads
dlbench's canonical weights into it, every variable set from exactly one canonical array (a variable
left over or unset is an error); :func:`keras_hub_causal_lm` puts keras-hub's ``GPT2CausalLM`` or
``LlamaCausalLM`` over it (the tied head: the token embedding, reversed) and :func:`keras_hub_logits`
runs its ``predict_on_batch`` on a batch of token ids. Layouts: keras-hub's
attention projections are ``EinsumDense`` kernels (D, heads, head_dim) and (heads, head_dim, D), the
canonical ones (D, heads x head_dim) and (heads x head_dim, D); its dense layers are (in, out) as the
canonical ones are.

keras-hub is installed without its dependencies (``pip install --no-deps keras-hub``): its
``tensorflow-text`` requirement would bring a second, full TensorFlow, and neither it nor kagglehub
is needed to build a backbone from a config.
"""

from __future__ import annotations

import numpy as np

from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the dlbench models with a keras-hub counterpart, by base name
FAMILIES = ("gpt2", "smollm2-135m")


def family(spec: ModelSpec) -> str:
    base = spec.name.split(":")[0]
    if base not in FAMILIES:
        raise ValueError(f"{spec.name} has no keras-hub counterpart here (known: {', '.join(FAMILIES)})")
    return base


def _shapes(spec: ModelSpec) -> tuple[L.Attention, int, int, int]:
    """The first attention layer, the width, the number of blocks and the vocabulary."""
    attn = next(x for x in L.walk(spec.layers) if isinstance(x, L.Attention))
    embed = next(x for x in spec.layers if isinstance(x, L.Embedding))
    blocks = sum(isinstance(x, L.SkipBlock) for x in spec.layers) // 2
    return attn, embed.dim, blocks, embed.vocab


def keras_hub_backbone(spec: ModelSpec, weights: Weights):
    """keras-hub's backbone of ``spec``'s shapes holding ``weights``."""
    import keras_hub

    fam = family(spec)
    attn, width, blocks, vocab = _shapes(spec)
    heads, kv, hd = attn.dims(width)
    if fam == "gpt2":
        fc = next(x for x in L.walk(spec.layers) if isinstance(x, L.Dense))
        positions = next(x for x in spec.layers if isinstance(x, L.PositionEmbedding)).max_len
        model = keras_hub.models.GPT2Backbone(vocabulary_size=vocab, num_layers=blocks, num_heads=heads,
                                              hidden_dim=width, intermediate_dim=fc.units, dropout=0.0,
                                              max_sequence_length=positions)
    else:
        mlp = next(x for x in L.walk(spec.layers) if isinstance(x, L.SwiGLU))
        norm = next(x for x in L.walk(spec.layers) if isinstance(x, L.RMSNorm))
        model = keras_hub.models.LlamaBackbone(vocabulary_size=vocab, num_layers=blocks, num_query_heads=heads,
                                               num_key_value_heads=kv, hidden_dim=width, intermediate_dim=mlp.hidden,
                                               rope_max_wavelength=attn.rope_theta, layer_norm_epsilon=norm.eps,
                                               dropout=0.0, tie_word_embeddings=True)
    try:
        values = keras_hub_state(spec, weights, heads, kv, hd)
    except KeyError as exc:
        raise ValueError(f"keras-hub {type(model).__name__}: a variable without a canonical array ({exc.args[0]} is "
                         "not in the weights)") from None
    names = {w.path for w in model.weights}
    missing, extra = names - set(values), set(values) - names
    if missing or extra:
        raise ValueError(f"keras-hub {type(model).__name__}: variables without a canonical array {sorted(missing)[:5]}, "
                         f"arrays without a variable {sorted(extra)[:5]}")
    for w in model.weights:
        if tuple(w.shape) != values[w.path].shape:
            raise ValueError(f"{w.path}: keras-hub's shape {tuple(w.shape)}, canonical {values[w.path].shape}")
        w.assign(values[w.path].astype(np.float32))
    return model


def keras_hub_state(spec: ModelSpec, weights: Weights, heads: int, kv: int, hd: int) -> dict[str, np.ndarray]:
    """Every keras-hub variable, by its path, from the canonical weights."""
    p, fam = weights.params, family(spec)
    _, width, blocks, _ = _shapes(spec)

    def proj(name: str, count: int) -> np.ndarray:
        return p[name].reshape(width, count, hd)

    out: dict[str, np.ndarray] = {}
    if fam == "gpt2":
        out.update({"token_embedding/embeddings": p["wte.weight"], "position_embedding/embeddings": p["wpe.weight"],
                    "layer_norm/gamma": p["ln_f.weight"], "layer_norm/beta": p["ln_f.bias"]})
        for i in range(blocks):
            t, c = f"transformer_layer_{i}", f"h{i}"
            for k, x in (("query", "q"), ("key", "k"), ("value", "v")):
                out[f"{t}/self_attention/{k}/kernel"] = proj(f"{c}.attn.w{x}", heads)
                out[f"{t}/self_attention/{k}/bias"] = p[f"{c}.attn.b{x}"].reshape(heads, hd)
            out.update({f"{t}/self_attention/attention_output/kernel": p[f"{c}.attn.wo"].reshape(heads, hd, width),
                        f"{t}/self_attention/attention_output/bias": p[f"{c}.attn.bo"],
                        f"{t}/self_attention_layer_norm/gamma": p[f"{c}.ln1.weight"],
                        f"{t}/self_attention_layer_norm/beta": p[f"{c}.ln1.bias"],
                        f"{t}/feedforward_intermediate_dense/kernel": p[f"{c}.mlp.fc.weight"],
                        f"{t}/feedforward_intermediate_dense/bias": p[f"{c}.mlp.fc.bias"],
                        f"{t}/feedforward_output_dense/kernel": p[f"{c}.mlp.proj.weight"],
                        f"{t}/feedforward_output_dense/bias": p[f"{c}.mlp.proj.bias"],
                        f"{t}/feedforward_layer_norm/gamma": p[f"{c}.ln2.weight"],
                        f"{t}/feedforward_layer_norm/beta": p[f"{c}.ln2.bias"]})
    else:
        out.update({"token_embedding/embeddings": p["embed.weight"], "sequence_output_layernorm/scale": p["norm.weight"]})
        for i in range(blocks):
            t, c = f"transformer_layer_{i}", f"l{i}"
            out.update({f"{t}/self_attention/query/kernel": proj(f"{c}.attn.wq", heads),
                        f"{t}/self_attention/key/kernel": proj(f"{c}.attn.wk", kv),
                        f"{t}/self_attention/value/kernel": proj(f"{c}.attn.wv", kv),
                        f"{t}/self_attention/attention_output/kernel": p[f"{c}.attn.wo"].reshape(heads, hd, width),
                        f"{t}/self_attention_layernorm/scale": p[f"{c}.attn_norm.weight"],
                        f"{t}/feedforward_gate_dense/kernel": p[f"{c}.mlp.w_gate"],
                        f"{t}/feedforward_intermediate_dense/kernel": p[f"{c}.mlp.w_up"],
                        f"{t}/feedforward_output_dense/kernel": p[f"{c}.mlp.w_down"],
                        f"{t}/feedforward_layernorm/scale": p[f"{c}.mlp_norm.weight"]})
    return out


def keras_hub_inputs(tokens: np.ndarray) -> dict[str, np.ndarray]:
    """A batch of token ids as keras-hub's models take it (every token valid)."""
    return {"token_ids": tokens.astype(np.int32), "padding_mask": np.ones(tokens.shape, np.int32)}


def keras_hub_causal_lm(spec: ModelSpec, weights: Weights, jit_compile: bool | str = "auto"):
    """keras-hub's causal LM over :func:`keras_hub_backbone` (``GPT2CausalLM`` or ``LlamaCausalLM``, no
    preprocessor): logits at every position through the tied head, compiled for ``predict_on_batch``
    as a user runs it (``jit_compile`` as dlbench's Keras backend sets it for the backend in use)."""
    import keras_hub

    backbone = keras_hub_backbone(spec, weights)
    cls = keras_hub.models.GPT2CausalLM if family(spec) == "gpt2" else keras_hub.models.LlamaCausalLM
    model = cls(backbone=backbone, preprocessor=None)
    model.compile(jit_compile=jit_compile)
    return model


def keras_hub_logits(model, tokens: np.ndarray) -> np.ndarray:
    """Logits at every position, from :func:`keras_hub_causal_lm`'s model."""
    return np.asarray(model.predict_on_batch(keras_hub_inputs(tokens)), dtype=np.float64)
