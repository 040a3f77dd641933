"""The oracle checked against loops written out by hand on tiny inputs."""

import numpy as np

from dlbench.gate import reference as R
from dlbench.models.layers import LRN, Pool2d


def naive_conv(x, w, b, stride, pad, groups):
    n, c, h, wd = x.shape
    o, cg, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for ni in range(n):
        for oi in range(o):
            g = oi // og
            for i in range(oh):
                for j in range(ow):
                    patch = xp[ni, g * cg:(g + 1) * cg, i * stride:i * stride + k, j * stride:j * stride + k]
                    out[ni, oi, i, j] = (patch * w[oi]).sum() + b[oi]
    return out


def test_conv_matches_loops_with_groups_stride_padding():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 7))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    np.testing.assert_allclose(R.conv2d(x, w, b, 2, 1, 2), naive_conv(x, w, b, 2, 1, 2), rtol=1e-12)


def test_max_pool_ceil_mode_covers_the_edge():
    x = np.arange(25.0).reshape(1, 1, 5, 5)
    out = R.pool2d(x, Pool2d("max", 2, 2, ceil_mode=True))
    assert out.shape == (1, 1, 3, 3)
    assert out[0, 0, 2, 2] == 24.0  # the partial last window holds only x[4, 4]


def test_avg_pool_ceil_divides_by_elements_inside():
    x = np.ones((1, 1, 4, 4))
    x[0, 0, 3, 3] = 5.0
    out = R.pool2d(x, Pool2d("avg", 3, 2, ceil_mode=True))
    assert out.shape == (1, 1, 2, 2)
    # last window covers rows/cols 2..3 only: 4 elements, sum 1+1+1+5
    assert out[0, 0, 1, 1] == 2.0
    assert out[0, 0, 0, 0] == 1.0


def test_lrn_by_hand():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 7, 2, 2))
    layer = LRN(5, 1e-2, 0.75, 2.0)
    out = R.lrn(x, layer)
    c = 3
    s = (x[0, 1:6, 0, 0] ** 2).sum()
    assert np.isclose(out[0, c, 0, 0], x[0, c, 0, 0] / (2.0 + 1e-2 / 5 * s) ** 0.75)


def test_lstm_step_by_hand():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1, 3))
    wx, wh, b = rng.standard_normal((3, 8)), rng.standard_normal((2, 8)), rng.standard_normal(8)
    z = x[0, 0] @ wx + b
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = sig(z[:2]) * np.tanh(z[4:6])
    h = sig(z[6:8]) * np.tanh(c)
    np.testing.assert_allclose(R.lstm(x, wx, wh, b)[0, 0], h, rtol=1e-12)


def test_batch_norm_train_uses_batch_statistics():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 2, 2)) * 5 + 2
    out = R.batch_norm(x, np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), 0.0, train=True)
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=(0, 2, 3)), 1, atol=1e-9)


def test_cross_entropy_uniform_logits():
    from dlbench.data.synthetic import Batch
    from dlbench.models import get_model

    spec = get_model("lenet")
    batch = Batch(np.zeros((3, 1, 28, 28), np.float32), np.array([0, 1, 2]))
    assert np.isclose(R.loss_value(spec, np.zeros((3, 10)), batch, {}), np.log(10))


# --- transformer layers ------------------------------------------------------------------------------
def _attention_params(rng, d, heads, kv, hd, bias=True):
    from dlbench.models.layers import Attention

    layer = Attention("a", heads, kv, hd, bias=bias)
    return layer, {k: rng.standard_normal(s) * 0.3 for k, s in layer.params((5, d)).items()}


def test_attention_one_head_by_hand():
    rng = np.random.default_rng(4)
    layer, p = _attention_params(rng, 4, 1, 1, 4)
    x = rng.standard_normal((1, 3, 4))
    q, k, v = (x[0] @ p[f"a.w{c}"] + p[f"a.b{c}"] for c in "qkv")
    out = np.zeros((3, 4))
    for i in range(3):
        s = np.array([q[i] @ k[j] / 2.0 for j in range(3)])
        w = np.exp(s) / np.exp(s).sum()
        out[i] = sum(w[j] * v[j] for j in range(3))
    np.testing.assert_allclose(R.attention(x, p, layer, None)[0], out @ p["a.wo"] + p["a.bo"], rtol=1e-12)


def test_grouped_query_attention_is_multi_head_with_shared_key_values():
    from dataclasses import replace

    rng = np.random.default_rng(5)
    gqa, p = _attention_params(rng, 8, 4, 2, 2)
    x = rng.standard_normal((2, 5, 8))
    # the same function as 4 key/value heads, head h a copy of key/value head h // 2
    mha = replace(gqa, kv_heads=4)
    full = dict(p)
    for w, b in (("a.wk", "a.bk"), ("a.wv", "a.bv")):
        full[w] = np.repeat(p[w].reshape(8, 2, 2), 2, axis=1).reshape(8, 8)
        full[b] = np.repeat(p[b].reshape(2, 2), 2, axis=0).reshape(8)
    np.testing.assert_allclose(R.attention(x, p, gqa, None), R.attention(x, full, mha, None), rtol=1e-12)


def test_causal_and_padding_masks_hide_what_they_should():
    from dataclasses import replace

    rng = np.random.default_rng(6)
    layer, p = _attention_params(rng, 8, 2, 2, 4)
    x = rng.standard_normal((1, 6, 8))
    later = x.copy()
    later[:, 4:] += 1.0
    causal = replace(layer, causal=True)
    np.testing.assert_array_equal(R.attention(x, p, causal, None)[:, :4], R.attention(later, p, causal, None)[:, :4])
    assert not np.allclose(R.attention(x, p, layer, None)[:, :4], R.attention(later, p, layer, None)[:, :4])
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.float32)
    np.testing.assert_array_equal(R.attention(x, p, layer, mask)[:, :4], R.attention(later, p, layer, mask)[:, :4])


def test_rope_rotates_pairs_and_keeps_norms():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 1, 3, 4))
    out = R.rope(x, 10000.0)
    np.testing.assert_allclose(out[..., 0, :], x[..., 0, :])  # position 0: no rotation
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1))
    # position 1, pair 0 (elements 0 and 2) turns by 1 radian
    a, b = x[0, 0, 1, 0], x[0, 0, 1, 2]
    np.testing.assert_allclose(out[0, 0, 1, [0, 2]], [a * np.cos(1) - b * np.sin(1), b * np.cos(1) + a * np.sin(1)])


def test_norms_and_gelu_by_hand():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    ln = R.layer_norm(x, np.ones(4), np.zeros(4), 0.0)
    np.testing.assert_allclose([ln.mean(), ln.var()], [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(R.rms_norm(x, np.full(4, 2.0), 0.0), 2 * x / np.sqrt(12.5))
    assert np.isclose(R.gelu(np.array([1.0]), "none")[0], 0.8413447460685429)  # Phi(1)
    assert np.isclose(R.gelu(np.array([1.0]), "tanh")[0], 0.8411919906082768)
