"""The TensorFlow decoder: ``tf.function`` prefill and decode step over a fixed-size key/value cache
held in ``tf.Variable``s (allocated once) and written in place by a sliced ``assign`` at the step's
position (a tensor, so one traced graph serves every position). Attention is written with
``tf.einsum`` (grouped-query heads by a reshape, never copied): causal over the prompt in the prefill,
masked to the positions written so far in a step. The ``xla`` variant compiles both functions with
XLA (``jit_compile=True``), as the TensorFlow backend's ``xla`` variant does; ``function`` runs them
as graphs. The argmax is inside each function.

Weights are the canonical ones (``x @ W`` is TensorFlow's layout) as constants of the device;
``bf16`` casts them and the cache to bfloat16, rotary tables made in float64 and cast.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from dlbench.frameworks.decoding import Decoder, attention_layers, is_lm_head
from dlbench.frameworks.tensorflow.tf_util import tf_device
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16}


class TFDecoder(Decoder):
    framework = "tensorflow"
    variants = ("function", "xla")

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        self.dtype = DTYPES[precision]
        self.dev = tf_device(device)
        with tf.device(self.dev):
            self.w = {name: tf.constant(value, self.dtype) for name, value in weights.params.items()}
            self.slots: dict[str, int] = {}
            self.cache: list[tuple[tf.Variable, tf.Variable]] = []
            for i, (layer, dim) in enumerate(attention_layers(spec)):
                _, kv, hd = layer.dims(dim)
                self.slots[layer.name] = i
                self.cache.append(tuple(tf.Variable(tf.zeros((batch, max_len, kv, hd), self.dtype), trainable=False)
                                        for _ in range(2)))
                if layer.rope_theta and f"rope:{layer.rope_theta}" not in self.w:
                    angles = L.rope_angles(max_len, hd, layer.rope_theta)
                    self.w[f"rope:{layer.rope_theta}"] = tf.constant(np.stack([np.cos(angles), np.sin(angles)]),
                                                                     self.dtype)
        jit = self.variant == "xla"
        self._prefill = tf.function(self.run_prefill, jit_compile=jit, autograph=False)
        self._step = tf.function(self.run_step, jit_compile=jit, autograph=False)

    # --- the contract ----------------------------------------------------------------------------
    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        with tf.device(self.dev):
            logits, token = self._prefill(tf.constant(prompt, tf.int32))
        self.pos = prompt.shape[1]
        return logits, token

    def step(self, tokens: Any) -> tuple[Any, Any]:
        with tf.device(self.dev):
            logits, token = self._step(tf.cast(tokens, tf.int32), tf.constant(self.pos, tf.int32))
        self.pos += 1
        return logits, token

    def host(self, array: Any) -> np.ndarray:
        out = array.numpy()
        return out.astype(np.float32) if array.dtype == tf.bfloat16 else out

    @property
    def cache_bytes(self) -> int:
        return sum(int(np.prod(v.shape)) * v.dtype.size for pair in self.cache for v in pair)

    def info(self) -> dict[str, Any]:
        return {"cache": "fixed size, tf.Variable, sliced assign", "attention": "tf.einsum",
                "compiled": "XLA" if self.variant == "xla" else "tf.function graph", "dtype": self.dtype.name}

    # --- the functions -----------------------------------------------------------------------------
    def run_prefill(self, tokens: tf.Tensor):
        positions = tf.range(tf.shape(tokens)[1])
        logits = self.run(self.spec.layers, tokens, positions, tf.constant(0, tf.int32), prefill=True)
        return logits, tf.argmax(logits, axis=-1, output_type=tf.int32)

    def run_step(self, tokens: tf.Tensor, pos: tf.Tensor):
        logits = self.run(self.spec.layers, tokens[:, None], pos[None], pos, prefill=False)
        return logits, tf.argmax(logits, axis=-1, output_type=tf.int32)

    def cache_start(self, start: tf.Tensor) -> tf.Tensor:
        """The position the keys and values are written from (tests plant an off-by-one here)."""
        return start

    def run(self, layers: tuple[L.Layer, ...], x: tf.Tensor, positions: tf.Tensor, start: tf.Tensor,
            prefill: bool) -> tf.Tensor:
        w = self.w
        for layer in layers:
            if isinstance(layer, L.Embedding):
                x = tf.gather(w[f"{layer.name}.weight"], x)
            elif isinstance(layer, L.PositionEmbedding):
                x = x + tf.gather(w[f"{layer.name}.weight"], positions)
            elif isinstance(layer, L.LayerNorm):
                mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
                x = (x - mean) * tf.math.rsqrt(var + layer.eps) * w[f"{layer.name}.weight"] + w[f"{layer.name}.bias"]
            elif isinstance(layer, L.RMSNorm):
                x = x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + layer.eps) \
                    * w[f"{layer.name}.weight"]
            elif isinstance(layer, L.GELU):
                x = tf.nn.gelu(x, approximate=layer.approximate == "tanh")
            elif isinstance(layer, L.Dense):
                x = x[:, -1] if is_lm_head(self.spec, layer) else x  # an untied head: the last position only
                x = tf.matmul(x, w[f"{layer.name}.weight"])
                if layer.bias:
                    x = x + w[f"{layer.name}.bias"]
            elif isinstance(layer, L.SwiGLU):
                n = layer.name
                x = tf.matmul(tf.nn.silu(tf.matmul(x, w[f"{n}.w_gate"])) * tf.matmul(x, w[f"{n}.w_up"]),
                              w[f"{n}.w_down"])
            elif isinstance(layer, L.Attention):
                x = self.attention(layer, x, positions, start, prefill)
            elif isinstance(layer, L.SkipBlock):
                x = self.run(layer.post, x + self.run(layer.body, x, positions, start, prefill), positions, start,
                             prefill)
            elif isinstance(layer, L.LMHead):
                x = tf.matmul(x[:, -1], w[f"{layer.tied_to}.weight"], transpose_b=True)  # the last position only
        return x

    def attention(self, layer: L.Attention, x: tf.Tensor, positions: tf.Tensor, start: tf.Tensor,
                  prefill: bool) -> tf.Tensor:
        n, t, d = x.shape[0], tf.shape(x)[1], x.shape[-1]
        heads, kv, hd = layer.dims(d)
        w, name = self.w, layer.name

        def project(p: str, count: int) -> tf.Tensor:
            y = tf.matmul(x, w[f"{name}.w{p}"])
            if layer.bias:
                y = y + w[f"{name}.b{p}"]
            return tf.reshape(y, (n, t, count, hd))

        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if layer.rope_theta:
            table = tf.gather(w[f"rope:{layer.rope_theta}"], positions, axis=1)[:, None, :, None, :]
            q, k = _rotate(q, table[0], table[1]), _rotate(k, table[0], table[1])
        k_cache, v_cache = self.cache[self.slots[name]]
        at = self.cache_start(start)
        k_cache[:, at:at + t].assign(k)
        v_cache[:, at:at + t].assign(v)
        if prefill:  # the prompt attends to itself, causally
            keys, values = k, v
            allowed = tf.linalg.band_part(tf.ones((t, t), tf.bool), -1, 0)[None, None, None]
        else:  # one query against every position written so far
            keys, values = k_cache.read_value(), v_cache.read_value()
            allowed = (tf.range(self.max_len) <= start)[None, None, None, None, :]
        group = heads // kv
        q = tf.reshape(q, (n, t, kv, group, hd))
        scores = tf.einsum("ntkgd,nskd->nkgts", q, keys) / tf.cast(math.sqrt(hd), q.dtype)
        scores = tf.where(allowed, scores, tf.cast(-1e30 if q.dtype == tf.float32 else -3e38, q.dtype))
        out = tf.einsum("nkgts,nskd->ntkgd", tf.nn.softmax(scores, axis=-1), values)
        out = tf.matmul(tf.reshape(out, (n, t, heads * hd)), w[f"{name}.wo"])
        return out + w[f"{name}.bo"] if layer.bias else out


def _rotate(x: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor) -> tf.Tensor:
    half = x.shape[-1] // 2
    return x * cos + tf.concat([-x[..., half:], x[..., :half]], axis=-1) * sin
