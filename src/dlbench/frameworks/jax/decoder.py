"""The JAX decoder: a jitted prefill and a jitted decode step over a fixed-size key/value cache,
written with ``lax.dynamic_update_slice`` at the step's position (a traced scalar, so one executable
serves every position) and donated to each call, so XLA updates it in place. Attention is
``jax.nn.dot_product_attention`` in JAX's (N, T, heads, head_dim) layout (grouped-query heads
natively): causal over the prompt in the prefill, masked to the positions written so far in a step.
The argmax is inside each jitted function.

Weights are the canonical ones (``x @ W`` is JAX's layout already) as device arrays passed to the
functions, never baked in as constants; ``bf16`` casts them and the cache to bfloat16, rotary tables
made in float64 and cast, as the JAX backend does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.frameworks.decoding import Decoder, attention_layers, is_lm_head
from dlbench.frameworks.jax.backend import jax_device
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}


class JaxDecoder(Decoder):
    framework = "jax"
    variants = ("jit",)

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        self.dtype = DTYPES[precision]
        self.dev = jax_device(device)
        put = lambda a, dt: jax.device_put(jnp.asarray(a, dt), self.dev)  # noqa: E731
        self.params = {name: put(value, self.dtype) for name, value in weights.params.items()}
        self.slots: dict[str, int] = {}
        self.cache: list[tuple[jax.Array, jax.Array]] = []
        for i, (layer, dim) in enumerate(attention_layers(spec)):
            _, kv, hd = layer.dims(dim)
            self.slots[layer.name] = i
            self.cache.append((put(np.zeros((batch, max_len, kv, hd)), self.dtype),
                               put(np.zeros((batch, max_len, kv, hd)), self.dtype)))
            if layer.rope_theta and f"rope:{layer.rope_theta}" not in self.params:
                angles = L.rope_angles(max_len, hd, layer.rope_theta)
                self.params[f"rope:{layer.rope_theta}"] = put(np.stack([np.cos(angles), np.sin(angles)]), self.dtype)
        self._prefill = jax.jit(self.run_prefill, donate_argnums=(1,))
        self._step = jax.jit(self.run_step, donate_argnums=(1,))

    # --- the contract ----------------------------------------------------------------------------
    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        tokens = jax.device_put(jnp.asarray(prompt, jnp.int32), self.dev)
        logits, token, self.cache = self._prefill(self.params, self.cache, tokens)
        self.pos = prompt.shape[1]
        return logits, token

    def step(self, tokens: Any) -> tuple[Any, Any]:
        if isinstance(tokens, np.ndarray):
            tokens = jax.device_put(jnp.asarray(tokens, jnp.int32), self.dev)
        logits, token, self.cache = self._step(self.params, self.cache, tokens, jnp.int32(self.pos))
        self.pos += 1
        return logits, token

    def host(self, array: Any) -> np.ndarray:
        out = np.asarray(jax.device_get(array))
        return out.astype(np.float32) if out.dtype == jnp.bfloat16 else out

    @property
    def cache_bytes(self) -> int:
        return sum(a.nbytes for pair in self.cache for a in pair)

    def info(self) -> dict[str, Any]:
        return {"cache": "fixed size, lax.dynamic_update_slice, donated", "attention": "jax.nn.dot_product_attention",
                "compiled": True, "dtype": jnp.dtype(self.dtype).name}

    # --- the jitted functions ----------------------------------------------------------------------
    def run_prefill(self, params: dict, cache: list, tokens: jax.Array):
        cache = list(cache)
        positions = jnp.arange(tokens.shape[1])
        logits = self.run(self.spec.layers, params, cache, tokens, positions, jnp.int32(0), prefill=True)
        return logits, jnp.argmax(logits, axis=-1), cache

    def run_step(self, params: dict, cache: list, tokens: jax.Array, pos: jax.Array):
        cache = list(cache)
        logits = self.run(self.spec.layers, params, cache, tokens[:, None], pos[None], pos, prefill=False)
        return logits, jnp.argmax(logits, axis=-1), cache

    def cache_start(self, start: jax.Array) -> jax.Array:
        """The position the step's keys and values are written from (tests plant an off-by-one here)."""
        return start

    def run(self, layers: tuple[L.Layer, ...], p: dict, cache: list, x: jax.Array, positions: jax.Array,
            start: jax.Array, prefill: bool) -> jax.Array:
        for layer in layers:
            if isinstance(layer, L.Embedding):
                x = jnp.take(p[f"{layer.name}.weight"], x, axis=0)
            elif isinstance(layer, L.PositionEmbedding):
                x = x + jnp.take(p[f"{layer.name}.weight"], positions, axis=0)
            elif isinstance(layer, L.LayerNorm):
                mean = x.mean(-1, keepdims=True)
                var = jnp.square(x - mean).mean(-1, keepdims=True)
                x = (x - mean) * lax.rsqrt(var + layer.eps) * p[f"{layer.name}.weight"] + p[f"{layer.name}.bias"]
            elif isinstance(layer, L.RMSNorm):
                x = x * lax.rsqrt(jnp.square(x).mean(-1, keepdims=True) + layer.eps) * p[f"{layer.name}.weight"]
            elif isinstance(layer, L.GELU):
                x = jax.nn.gelu(x, approximate=layer.approximate == "tanh")
            elif isinstance(layer, L.Dense):
                x = x[:, -1] if is_lm_head(self.spec, layer) else x  # an untied head: the last position only
                x = x @ p[f"{layer.name}.weight"]
                if layer.bias:
                    x = x + p[f"{layer.name}.bias"]
            elif isinstance(layer, L.SwiGLU):
                n = layer.name
                x = (jax.nn.silu(x @ p[f"{n}.w_gate"]) * (x @ p[f"{n}.w_up"])) @ p[f"{n}.w_down"]
            elif isinstance(layer, L.Attention):
                x = self.attention(layer, p, cache, x, positions, start, prefill)
            elif isinstance(layer, L.SkipBlock):
                body = self.run(layer.body, p, cache, x, positions, start, prefill)
                x = self.run(layer.post, p, cache, x + body, positions, start, prefill)
            elif isinstance(layer, L.LMHead):
                x = x[:, -1] @ p[f"{layer.tied_to}.weight"].T  # the last position's logits only
        return x

    def attention(self, layer: L.Attention, p: dict, cache: list, x: jax.Array, positions: jax.Array,
                  start: jax.Array, prefill: bool) -> jax.Array:
        n, t, d = x.shape
        heads, kv, hd = layer.dims(d)
        name = layer.name

        def project(w: str, count: int) -> jax.Array:
            y = x @ p[f"{name}.w{w}"]
            if layer.bias:
                y = y + p[f"{name}.b{w}"]
            return y.reshape(n, t, count, hd)

        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if layer.rope_theta:
            table = jnp.take(p[f"rope:{layer.rope_theta}"], positions, axis=1)[:, None, :, None, :]
            cos, sin = table[0], table[1]
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        slot = self.slots[name]
        k_cache, v_cache = cache[slot]
        at = (0, self.cache_start(start), 0, 0)
        k_cache, v_cache = lax.dynamic_update_slice(k_cache, k, at), lax.dynamic_update_slice(v_cache, v, at)
        cache[slot] = (k_cache, v_cache)
        if prefill:  # the prompt attends to itself, causally
            out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        else:  # one query against every position written so far
            mask = (jnp.arange(self.max_len) <= start)[None, None, None, :]
            out = jax.nn.dot_product_attention(q, k_cache, v_cache, mask=mask)
        out = out.reshape(n, t, heads * hd) @ p[f"{name}.wo"]
        return out + p[f"{name}.bo"] if layer.bias else out


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    return x * cos + jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin
