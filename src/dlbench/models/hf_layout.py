"""The one table of how a Hugging Face checkpoint's tensors hold dlbench's canonical arrays, read in both
directions: :func:`from_hf` (``hf:DIR``, :mod:`dlbench.models.hf_checkpoint`) and :func:`to_hf`
(:mod:`dlbench.gate.hf_transformers`, ``dlbench export-model``). The layouts: Hugging Face's ``nn.Linear``
weights are (out, in), the canonical ones (in, out); GPT-2's ``Conv1D`` is (in, out) with q, k, v side
by side in ``c_attn``; ViT's class token and positions carry leading 1-axes. NumPy only."""

from __future__ import annotations

import math

import numpy as np

from dlbench.models.spec import ModelSpec

#: the zoo's transformers and their family (what ``export-model`` writes)
ZOO_FAMILIES = {"gpt2": "gpt2", "smollm2-135m": "llama", "bert-base": "bert", "vit-b16": "vit"}
#: how a Hugging Face tensor holds canonical arrays: ``same``; ``t`` transposed (nn.Linear's (out, in));
#: ``cat`` side by side on axis 1 (GPT-2's c_attn: q, k, v); ``lead`` with leading 1-axes (ViT's class
#: token and positions); ``zero``: no Hugging Face tensor, the canonical array is zero (Qwen2's o bias)
Entry = tuple[str, tuple[str, ...], str]


def family_of(spec: ModelSpec) -> str:
    """A transformer's Hugging Face family: an ``hf:`` spec's own, or its zoo model's."""
    fam = spec.options.get("family") or ZOO_FAMILIES.get(spec.name.split(":")[0].split("#")[0])
    if fam is None:
        raise ValueError(f"{spec.name} has no Hugging Face counterpart (transformers: {', '.join(ZOO_FAMILIES)})")
    return fam


def blocks(spec: ModelSpec) -> int:
    """How many transformer blocks (attention layers) ``spec`` has."""
    return sum(1 for n in spec.param_shapes() if n.endswith(".attn.wq"))


def _lin(hf: str, weight: str, bias: str | None = None) -> list[Entry]:
    return [(f"{hf}.weight", (weight,), "t")] + ([(f"{hf}.bias", (bias,), "same")] if bias else [])


def layout(spec: ModelSpec, vit_v5: bool = False) -> list[Entry]:
    """Every Hugging Face tensor of ``spec`` as its checkpoint file names it, with the canonical arrays
    it holds and how. ``vit_v5``: ViT's module names as transformers 5 builds them in memory
    (``vit.layers.N.attention.q_proj``; its files keep the 4.x names this gives by default)."""
    fam, n = family_of(spec), blocks(spec)
    shapes = spec.param_shapes()
    out: list[Entry] = []
    if fam == "gpt2":
        out += [("transformer.wte.weight", ("wte.weight",), "same"), ("transformer.wpe.weight", ("wpe.weight",), "same"),
                ("transformer.ln_f.weight", ("ln_f.weight",), "same"), ("transformer.ln_f.bias", ("ln_f.bias",), "same")]
        for i in range(n):
            h, c = f"transformer.h.{i}", f"h{i}"
            out += [(f"{h}.ln_1.weight", (f"{c}.ln1.weight",), "same"), (f"{h}.ln_1.bias", (f"{c}.ln1.bias",), "same"),
                    (f"{h}.attn.c_attn.weight", tuple(f"{c}.attn.w{x}" for x in "qkv"), "cat"),
                    (f"{h}.attn.c_attn.bias", tuple(f"{c}.attn.b{x}" for x in "qkv"), "cat"),
                    (f"{h}.attn.c_proj.weight", (f"{c}.attn.wo",), "same"),
                    (f"{h}.attn.c_proj.bias", (f"{c}.attn.bo",), "same"),
                    (f"{h}.ln_2.weight", (f"{c}.ln2.weight",), "same"), (f"{h}.ln_2.bias", (f"{c}.ln2.bias",), "same"),
                    (f"{h}.mlp.c_fc.weight", (f"{c}.mlp.fc.weight",), "same"),
                    (f"{h}.mlp.c_fc.bias", (f"{c}.mlp.fc.bias",), "same"),
                    (f"{h}.mlp.c_proj.weight", (f"{c}.mlp.proj.weight",), "same"),
                    (f"{h}.mlp.c_proj.bias", (f"{c}.mlp.proj.bias",), "same")]
    elif fam == "bert":
        e = "bert.embeddings"
        out += [(f"{e}.word_embeddings.weight", ("word.weight",), "same"),
                (f"{e}.position_embeddings.weight", ("position.weight",), "same"),
                (f"{e}.token_type_embeddings.weight", ("token_type.weight",), "same"),
                (f"{e}.LayerNorm.weight", ("embed_ln.weight",), "same"), (f"{e}.LayerNorm.bias", ("embed_ln.bias",), "same"),
                *_lin("bert.pooler.dense", "pooler.weight", "pooler.bias"),
                *_lin("classifier", "classifier.weight", "classifier.bias")]
        for i in range(n):
            h, c = f"bert.encoder.layer.{i}", f"l{i}"
            for hf, x in (("query", "q"), ("key", "k"), ("value", "v")):
                out += _lin(f"{h}.attention.self.{hf}", f"{c}.attn.w{x}", f"{c}.attn.b{x}")
            out += [*_lin(f"{h}.attention.output.dense", f"{c}.attn.wo", f"{c}.attn.bo"),
                    (f"{h}.attention.output.LayerNorm.weight", (f"{c}.attn_ln.weight",), "same"),
                    (f"{h}.attention.output.LayerNorm.bias", (f"{c}.attn_ln.bias",), "same"),
                    *_lin(f"{h}.intermediate.dense", f"{c}.mlp.fc.weight", f"{c}.mlp.fc.bias"),
                    *_lin(f"{h}.output.dense", f"{c}.mlp.proj.weight", f"{c}.mlp.proj.bias"),
                    (f"{h}.output.LayerNorm.weight", (f"{c}.mlp_ln.weight",), "same"),
                    (f"{h}.output.LayerNorm.bias", (f"{c}.mlp_ln.bias",), "same")]
    elif fam == "vit":
        e = "vit.embeddings"
        out += [(f"{e}.cls_token", ("patch.cls",), "lead"), (f"{e}.position_embeddings", ("position.weight",), "lead"),
                (f"{e}.patch_embeddings.projection.weight", ("patch.weight",), "same"),
                (f"{e}.patch_embeddings.projection.bias", ("patch.bias",), "same"),
                ("vit.layernorm.weight", ("ln.weight",), "same"), ("vit.layernorm.bias", ("ln.bias",), "same"),
                *_lin("classifier", "head.weight", "head.bias")]
        for i in range(n):
            c = f"l{i}"
            if vit_v5:
                h = f"vit.layers.{i}"
                names = {x: f"{h}.attention.{x}_proj" for x in "qkvo"} | {"fc": f"{h}.mlp.fc1", "proj": f"{h}.mlp.fc2"}
            else:
                h = f"vit.encoder.layer.{i}"
                names = {x: f"{h}.attention.attention.{hf}" for x, hf in (("q", "query"), ("k", "key"), ("v", "value"))}
                names |= {"o": f"{h}.attention.output.dense", "fc": f"{h}.intermediate.dense",
                          "proj": f"{h}.output.dense"}
            for x in "qkvo":
                out += _lin(names[x], f"{c}.attn.w{x}", f"{c}.attn.b{x}")
            out += [(f"{h}.layernorm_before.weight", (f"{c}.ln1.weight",), "same"),
                    (f"{h}.layernorm_before.bias", (f"{c}.ln1.bias",), "same"),
                    (f"{h}.layernorm_after.weight", (f"{c}.ln2.weight",), "same"),
                    (f"{h}.layernorm_after.bias", (f"{c}.ln2.bias",), "same"),
                    *_lin(names["fc"], f"{c}.mlp.fc.weight", f"{c}.mlp.fc.bias"),
                    *_lin(names["proj"], f"{c}.mlp.proj.weight", f"{c}.mlp.proj.bias")]
    else:  # llama, qwen2
        out += [("model.embed_tokens.weight", ("embed.weight",), "same"), ("model.norm.weight", ("norm.weight",), "same")]
        for i in range(n):
            h, c = f"model.layers.{i}", f"l{i}"
            out += [(f"{h}.input_layernorm.weight", (f"{c}.attn_norm.weight",), "same"),
                    (f"{h}.post_attention_layernorm.weight", (f"{c}.mlp_norm.weight",), "same")]
            biased = f"{c}.attn.bq" in shapes
            for x in "qkvo":
                if biased and fam == "qwen2" and x == "o":
                    out += [*_lin(f"{h}.self_attn.o_proj", f"{c}.attn.wo"), ("", (f"{c}.attn.bo",), "zero")]
                else:
                    out += _lin(f"{h}.self_attn.{x}_proj", f"{c}.attn.w{x}", f"{c}.attn.b{x}" if biased else None)
            for hf, leaf in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down")):
                out += _lin(f"{h}.mlp.{hf}", f"{c}.mlp.{leaf}")
    if "lm_head.weight" in shapes:  # an untied head of its own
        out += _lin("lm_head", "lm_head.weight")
    return out


def to_hf(spec: ModelSpec, params: dict[str, np.ndarray], vit_v5: bool = False) -> dict[str, np.ndarray]:
    """The Hugging Face tensors of canonical ``params`` (tied ones once)."""
    out: dict[str, np.ndarray] = {}
    for hf, names, how in layout(spec, vit_v5):
        if how == "zero":
            if any(np.any(params[n]) for n in names):
                raise ValueError(f"{names[0]} is not zero: a {family_of(spec)} checkpoint has no place for it")
            continue
        arrays = [params[n] for n in names]
        out[hf] = {"same": lambda a: a[0], "t": lambda a: a[0].T, "cat": lambda a: np.concatenate(a, axis=-1),
                   "lead": lambda a: a[0].reshape((1,) * (3 - a[0].ndim) + a[0].shape)}[how](arrays)
    return out


def from_hf(spec: ModelSpec, state: dict[str, np.ndarray], where: str = "checkpoint") -> dict[str, np.ndarray]:
    """The canonical arrays of ``spec`` from Hugging Face tensors; a missing tensor or a wrong shape is an error."""
    shapes = spec.param_shapes()
    out: dict[str, np.ndarray] = {}
    for hf, names, how in layout(spec):
        if how == "zero":
            out.update({n: np.zeros(shapes[n], np.float32) for n in names})
            continue
        if hf not in state:
            raise ValueError(f"{where}: no tensor {hf} (a {family_of(spec)} model of this config has one)")
        value = state[hf]
        if how == "cat":
            sizes = np.cumsum([shapes[n][-1] for n in names])[:-1]
            parts = np.split(value, sizes, axis=-1) if value.shape[-1] == sum(shapes[n][-1] for n in names) else []
        else:
            parts = [{"same": value, "t": value.T, "lead": value.reshape(shapes[names[0]])
                      if value.size == math.prod(shapes[names[0]]) else value}[how]]
        for n, part in zip(names, parts, strict=False):
            out[n] = np.ascontiguousarray(part, np.float32)
        if len(parts) != len(names) or any(out[n].shape != shapes[n] for n in names):
            raise ValueError(f"{where}: tensor {hf} is {list(value.shape)}; this config's "
                                  f"{', '.join(names)} need {[list(shapes[n]) for n in names]}")
    return out
