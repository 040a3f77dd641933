"""Is our JAX ResNet-56 as fast as ResNet-56 written directly in Flax? (issue: foundation)

The reference is a hand-written CIFAR ResNet-56 in idiomatic Flax NNX (``nnx.Conv``,
``nnx.BatchNorm``, basic blocks with option-A shortcuts: subsample and zero-pad the channels at
the end, as the spec does), trained the way Flax's performance guide writes a fast loop:
``nnx.Optimizer`` over ``optax.sgd(lr, momentum=0.9)``, ``nnx.split`` of (model, optimizer) once,
and a ``jax.jit`` step that merges, takes ``nnx.value_and_grad``, updates, and returns the new
state, which it donates. Ours is dlbench's jax backend ``train_step`` closure. Both start from the
same canonical weights (the first losses are compared, so the two are the same computation), take
the same device-resident batch (NHWC), run in the same process, and are timed step by step in
alternation (order reversed every round) after warm-up, each step ending in ``jax.block_until_ready``.
Target: ours >= 0.95x the direct version's throughput.
"""

from __future__ import annotations

import argparse
import os
import statistics
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import header, interleaved, ratio_ci
from flax import nnx


class Block(nnx.Module):
    """Basic block: conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(cin, cout, (3, 3), strides=stride, padding=1, use_bias=False, rngs=rngs)
        self.bn1 = nnx.BatchNorm(cout, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(cout, cout, (3, 3), padding=1, use_bias=False, rngs=rngs)
        self.bn2 = nnx.BatchNorm(cout, momentum=0.9, rngs=rngs)
        self.stride, self.extra = stride, cout - cin

    def __call__(self, x):
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.stride != 1 or self.extra:  # option A: subsample, zero-pad the channels
            x = jnp.pad(x[:, :: self.stride, :: self.stride, :], ((0, 0), (0, 0), (0, 0), (0, self.extra)))
        return nnx.relu(y + x)


class ResNet56(nnx.Module):
    def __init__(self, classes: int = 10, n: int = 9, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 16, (3, 3), padding=1, use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(16, momentum=0.9, rngs=rngs)
        blocks, cin = [], 16
        for stage, width in enumerate((16, 32, 64)):
            for b in range(n):
                blocks.append(Block(cin, width, 2 if stage > 0 and b == 0 else 1, rngs=rngs))
                cin = width
        self.blocks = nnx.Sequential(*blocks)
        self.fc = nnx.Linear(64, classes, rngs=rngs)

    def __call__(self, x):
        x = self.blocks(nnx.relu(self.bn(self.conv(x))))
        return self.fc(x.mean(axis=(1, 2)))


def load_canonical(model: ResNet56, params: dict[str, np.ndarray]) -> None:
    """Copy dlbench's canonical weights (OIHW kernels) into the direct model, so both compute the
    same function from the same start."""
    def conv_bn(conv: nnx.Conv, bn: nnx.BatchNorm, name: str) -> None:
        conv.kernel[...] = jnp.asarray(params[f"{name}.conv.weight"].transpose(2, 3, 1, 0))
        bn.scale[...] = jnp.asarray(params[f"{name}.bn.gamma"])
        bn.bias[...] = jnp.asarray(params[f"{name}.bn.beta"])

    conv_bn(model.conv, model.bn, "stem")
    n = len(model.blocks.layers) // 3
    for i, block in enumerate(model.blocks.layers):
        name = f"s{i // n + 1}b{i % n}"
        conv_bn(block.conv1, block.bn1, f"{name}.a")
        conv_bn(block.conv2, block.bn2, f"{name}.b")
    model.fc.kernel[...] = jnp.asarray(params["fc.weight"])
    model.fc.bias[...] = jnp.asarray(params["fc.bias"])


def direct_step(model: ResNet56, lr: float, x: jax.Array, y: jax.Array):
    """Flax's performance-guide loop: split once, jit a merge/grad/update/state function, donate."""
    model.train()
    optimizer = nnx.Optimizer(model, optax.sgd(lr, momentum=0.9), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    @partial(jax.jit, donate_argnums=1)
    def train_step(graphdef, state, x, y):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(model):
            return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    def step():
        nonlocal state
        loss, state = train_step(graphdef, state, x, y)
        return loss
    return step


def ours_step(batch_size: int):
    from dlbench.data import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights
    from dlbench.scenarios.timed import make_closure

    backend = get_backend("jax")
    spec = get_model("resnet-56")
    weights = init_weights(spec, 0)
    model = backend.build(spec, weights)
    placed = backend.place(make_batch(spec, batch_size), model)
    return make_closure("train_step", backend, model, placed, spec), placed, spec, weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=12, help="timed steps of each, alternating")
    args = ap.parse_args()
    ours, placed, spec, weights = ours_step(args.batch)
    direct_model = ResNet56(spec.input.classes, rngs=nnx.Rngs(0))
    direct_params = sum(int(p.size) for p in jax.tree.leaves(nnx.state(direct_model, nnx.Param)))
    assert direct_params == spec.param_count == 853_018, (direct_params, spec.param_count)
    load_canonical(direct_model, weights.params)
    direct = direct_step(direct_model, spec.learning_rate, placed["x"], placed["y"])
    first = [float(jax.block_until_ready(fn())) for fn in (ours, direct)]  # compiles both; same function?
    assert abs(first[0] - first[1]) <= 1e-4 * abs(first[1]), first
    fns = {"ours": ours, "direct": direct}
    interleaved(fns, 2, jax.block_until_ready)  # warm-up
    t = interleaved(fns, args.rounds, jax.block_until_ready)
    t_ours, t_direct = t["ours"], t["direct"]
    mo, md = statistics.median(t_ours), statistics.median(t_direct)
    lo, hi = ratio_ci(t_direct, t_ours)
    print(header("jax fidelity: dlbench resnet-56 train_step vs ResNet-56 written directly in Flax NNX"))
    print(f"- batch {args.batch}, input 32x32 (NHWC), {jax.default_backend()} ({jax.devices()[0].device_kind}), "
          f"{len(os.sched_getaffinity(0))} usable cores, {len(t_ours)} steps each, alternating step by step; "
          f"both {direct_params:,} parameters, first losses {first[0]:.6f} / {first[1]:.6f}")
    print(f"- direct Flax NNX: median {md * 1e3:.1f} ms/step ({args.batch / md:.2f} samples/s)")
    print(f"- dlbench jax: median {mo * 1e3:.1f} ms/step ({args.batch / mo:.2f} samples/s)")
    print(f"- throughput ratio dlbench / direct: **{md / mo:.3f}** (bootstrap 95% CI [{lo:.3f}, {hi:.3f}]; "
          "target >= 0.95)")


if __name__ == "__main__":
    main()
