"""The torch decoder: a static (preallocated) key/value cache, written in place with ``index_copy_``
at the step's position tensor, as Hugging Face's ``StaticCache`` does; attention is
``F.scaled_dot_product_attention`` (``enable_gqa`` for grouped-query heads), causal over the prompt
in the prefill and masked to the positions written so far in a step, so every step has the same
shapes. The ``compile`` variant compiles the decode step (``torch.compile``, default mode: one graph
for every position, since the position is a tensor) and the prefill.

Weights are the canonical ones, transposed once for ``F.linear``; ``bf16`` casts them (and the cache)
to bfloat16, rotary tables made in float32 and cast, as the torch backend does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dlbench.frameworks.decoding import Decoder, attention_layers, is_lm_head
from dlbench.frameworks.torch.layers import rope_tables
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class TorchDecoder(Decoder):
    framework = "torch"
    variants = ("eager", "compile")

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        self.dtype = DTYPES[precision]
        self.dev = torch.device(device)
        self.w: dict[str, torch.Tensor] = {}
        for name, value in weights.params.items():
            t = torch.from_numpy(np.ascontiguousarray(value))
            if value.ndim == 2 and _is_matrix(name, spec):
                t = t.t().contiguous()  # canonical (in, out) -> F.linear's (out, in)
            self.w[name] = t.to(self.dev, self.dtype)
        #: each norm's width as a Python int (a constant of a trace or a compiled graph)
        self.widths = {layer.name: (int(weights.params[f"{layer.name}.weight"].shape[0]),)
                       for layer in L.walk(spec.layers) if isinstance(layer, L.LayerNorm | L.RMSNorm)}
        self.slots: dict[str, int] = {}
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.rope: dict[float, tuple[torch.Tensor, torch.Tensor]] = {}
        for i, (layer, dim) in enumerate(attention_layers(spec)):
            _, kv, hd = layer.dims(dim)
            self.slots[layer.name] = i
            self.cache.append(tuple(torch.zeros(batch, kv, max_len, hd, dtype=self.dtype, device=self.dev)
                                    for _ in range(2)))
            if layer.rope_theta and layer.rope_theta not in self.rope:
                cos, sin = rope_tables(max_len, hd, layer.rope_theta)
                self.rope[layer.rope_theta] = (cos.to(self.dev, self.dtype), sin.to(self.dev, self.dtype))
        self.arange = torch.arange(max_len, device=self.dev)
        self._prefill, self._step = self.run_prefill, self.run_step
        if self.variant == "compile":
            self._prefill, self._step = torch.compile(self.run_prefill), torch.compile(self.run_step)

    # --- the contract ----------------------------------------------------------------------------
    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        tokens = torch.from_numpy(np.ascontiguousarray(prompt)).to(self.dev)
        with torch.inference_mode():
            logits, token = self._prefill(tokens)
        self.pos = prompt.shape[1]
        return logits, token

    def step(self, tokens: Any) -> tuple[Any, Any]:
        if isinstance(tokens, np.ndarray):
            tokens = torch.from_numpy(np.ascontiguousarray(tokens)).to(self.dev)
        pos = torch.tensor(self.pos, device=self.dev)
        with torch.inference_mode():
            logits, token = self._step(tokens, pos)
        self.pos += 1
        return logits, token

    def host(self, array: Any) -> np.ndarray:
        return array.float().cpu().numpy() if array.is_floating_point() else array.cpu().numpy()

    @property
    def cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for pair in self.cache for t in pair)

    def info(self) -> dict[str, Any]:
        return {"cache": "static, index_copy_", "attention": "F.scaled_dot_product_attention",
                "compiled": self.variant == "compile", "dtype": str(self.dtype).removeprefix("torch.")}

    # --- the functions (compiled by the compile variant) -----------------------------------------
    def run_prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tokens.shape[1], device=self.dev)
        logits = self.run(self.spec.layers, tokens, positions, prefill=True)
        return logits, logits.argmax(dim=-1)

    def run_step(self, tokens: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.run(self.spec.layers, tokens[:, None], pos[None], prefill=False)
        return logits, logits.argmax(dim=-1)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, width: tuple[int], eps: float) -> torch.Tensor:
        return F.rms_norm(x, width, weight, eps)

    def cache_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Where the keys and values of ``positions`` are written (tests plant an off-by-one here)."""
        return positions

    def run(self, layers: tuple[L.Layer, ...], x: torch.Tensor, positions: torch.Tensor, prefill: bool) -> torch.Tensor:
        w = self.w
        for layer in layers:
            if isinstance(layer, L.Embedding):
                x = F.embedding(x, w[f"{layer.name}.weight"])
            elif isinstance(layer, L.PositionEmbedding):
                x = x + w[f"{layer.name}.weight"][positions]
            elif isinstance(layer, L.LayerNorm):
                weight = w[f"{layer.name}.weight"]
                x = F.layer_norm(x, self.widths[layer.name], weight, w[f"{layer.name}.bias"], layer.eps)
            elif isinstance(layer, L.RMSNorm):
                x = self.rms_norm(x, w[f"{layer.name}.weight"], self.widths[layer.name], layer.eps)
            elif isinstance(layer, L.GELU):
                x = F.gelu(x, approximate=layer.approximate)
            elif isinstance(layer, L.Dense):
                x = x[:, -1] if is_lm_head(self.spec, layer) else x  # an untied head: the last position only
                x = F.linear(x, w[f"{layer.name}.weight"], w.get(f"{layer.name}.bias"))
            elif isinstance(layer, L.SwiGLU):
                n = layer.name
                x = F.linear(F.silu(F.linear(x, w[f"{n}.w_gate"])) * F.linear(x, w[f"{n}.w_up"]), w[f"{n}.w_down"])
            elif isinstance(layer, L.Attention):
                x = self.attention(layer, x, positions, prefill)
            elif isinstance(layer, L.SkipBlock):
                x = self.run(layer.post, x + self.run(layer.body, x, positions, prefill), positions, prefill)
            elif isinstance(layer, L.LMHead):
                x = F.linear(x[:, -1], w[f"{layer.tied_to}.weight"])  # the last position's logits only
        return x

    def attention(self, layer: L.Attention, x: torch.Tensor, positions: torch.Tensor, prefill: bool) -> torch.Tensor:
        n, t, d = x.shape
        heads, kv, hd = layer.dims(d)
        w, name = self.w, layer.name

        def project(p: str, count: int) -> torch.Tensor:
            y = F.linear(x, w[f"{name}.w{p}"], w.get(f"{name}.b{p}"))
            return y.view(n, t, count, hd).transpose(1, 2)

        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if layer.rope_theta:
            cos, sin = self.rope[layer.rope_theta]
            cos, sin = cos[positions], sin[positions]
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k_cache, v_cache = self.cache[self.slots[name]]
        where = self.cache_positions(positions)
        k_cache.index_copy_(2, where, k)
        v_cache.index_copy_(2, where, v)
        gqa = kv != heads
        if prefill:  # the prompt attends to itself, causally
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:  # one query against every position written so far
            mask = (self.arange <= positions[-1])[None, None, None, :]
            out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=gqa)
        out = out.transpose(1, 2).reshape(n, t, heads * hd)
        return F.linear(out, w[f"{name}.wo"], w.get(f"{name}.bo"))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def _is_matrix(name: str, spec: ModelSpec) -> bool:
    """A projection stored (in, out) canonically: every 2-D parameter but embedding and position tables."""
    tables = {f"{layer.name}.weight" for layer in L.walk(spec.layers)
              if isinstance(layer, L.Embedding | L.PositionEmbedding | L.SegmentEmbedding)}
    return name not in tables
