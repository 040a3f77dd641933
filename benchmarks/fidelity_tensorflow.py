"""Is our TensorFlow ResNet-56 as fast as ResNet-56 written directly in Keras? (issue: backends)

The reference is a hand-written CIFAR ResNet-56 as a Keras user writes it: the functional API
with ``keras.layers`` (``Conv2D``, ``BatchNormalization``, ``ReLU``, ``Add``,
``GlobalAveragePooling2D``, ``Dense``), basic blocks with option-A shortcuts (subsample, zero-pad
the channels; a small ``keras.ops`` layer, as Keras has none), and the stride-2 convolutions
padded explicitly with ``ZeroPadding2D(1)`` + a ``valid`` conv as ``keras.applications`` does (Keras's
``"same"`` pads only below/right at stride 2, which is a different function from the spec's
symmetric padding of 1). It is trained two ways, both timed:

* ``keras_fit``: ``model.compile(SGD(lr, momentum=0.9), SparseCategoricalCrossentropy(from_logits=True),
  jit_compile=...)`` and ``model.train_on_batch`` (what ``model.fit`` runs each step);
* ``keras_loop``: the custom-loop guide's ``tf.function(jit_compile=...)`` step with
  ``tf.GradientTape`` and ``optimizer.apply_gradients``.

Ours is dlbench's tensorflow backend ``train_step`` closure of the chosen variant (``function``:
``jit_compile=False`` on both sides; ``xla``: ``jit_compile=True`` on both sides). All three start
from the same canonical weights (the first losses are compared, so they are the same
computation), take the same batch (NHWC, on the device), run in one process with the same TF
thread pools, and are timed step by step in alternation (the order reversed every round), each
step ending when its loss is on the host.
Target: ours >= 0.95x the direct version's throughput.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import header, interleaved, ratio_ci  # noqa: E402
from keras import layers, ops  # noqa: E402


class ShortcutA(layers.Layer):
    """Option-A shortcut: take every ``stride``-th pixel, append zero channels."""

    def __init__(self, stride: int, extra: int, **kwargs):
        super().__init__(**kwargs)
        self.stride, self.extra = stride, extra

    def call(self, x):
        x = x[:, :: self.stride, :: self.stride, :]
        return ops.pad(x, ((0, 0), (0, 0), (0, 0), (0, self.extra)))


def conv_bn(x, width: int, stride: int, name: str):
    if stride == 1:
        x = layers.Conv2D(width, 3, padding="same", use_bias=False, name=f"{name}_conv")(x)
    else:
        x = layers.ZeroPadding2D(1, name=f"{name}_pad")(x)
        x = layers.Conv2D(width, 3, strides=stride, padding="valid", use_bias=False, name=f"{name}_conv")(x)
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"{name}_bn")(x)


def resnet56(classes: int = 10, n: int = 9) -> keras.Model:
    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(conv_bn(inputs, 16, 1, "stem"))
    cin = 16
    for stage, width in enumerate((16, 32, 64)):
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            name = f"s{stage + 1}b{b}"
            y = layers.ReLU()(conv_bn(x, width, stride, f"{name}_a"))
            y = conv_bn(y, width, 1, f"{name}_b")
            shortcut = ShortcutA(stride, width - cin)(x) if stride != 1 or width != cin else x
            x = layers.ReLU()(layers.Add()([y, shortcut]))
            cin = width
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes, name="fc")(x), name="resnet56")


def load_canonical(model: keras.Model, weights) -> None:
    """dlbench's canonical weights (OIHW kernels, BN gamma/beta and running statistics) into the
    direct model, so both compute the same function from the same start."""
    p, s = weights.params, weights.state
    for layer in model.layers:
        if isinstance(layer, layers.Conv2D):
            layer.kernel.assign(p[f"{_canonical(layer.name[:-5])}.conv.weight"].transpose(2, 3, 1, 0))
        elif isinstance(layer, layers.BatchNormalization):
            base = f"{_canonical(layer.name[:-3])}.bn"
            layer.gamma.assign(p[f"{base}.gamma"])
            layer.beta.assign(p[f"{base}.beta"])
            layer.moving_mean.assign(s[f"{base}.running_mean"])
            layer.moving_variance.assign(s[f"{base}.running_var"])
    fc = model.get_layer("fc")
    fc.kernel.assign(p["fc.weight"])
    fc.bias.assign(p["fc.bias"])


def _canonical(name: str) -> str:
    """``s2b0_a`` -> ``s2b0.a``; ``stem`` -> ``stem``."""
    return name.replace("_", ".")


def fit_step(model: keras.Model, lr: float, jit: bool, x, y):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    return lambda: model.train_on_batch(x, y)


def loop_step(model: keras.Model, lr: float, jit: bool, x, y):
    optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=jit)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss
    return lambda: train_step(x, y)


def ours_step(batch_size: int, variant: str):
    from dlbench.data import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights
    from dlbench.scenarios.timed import make_closure

    backend = get_backend("tensorflow")
    spec = get_model("resnet-56")
    weights = init_weights(spec, 0)
    model = backend.build(spec, weights, variant=variant)
    placed = backend.place(make_batch(spec, batch_size), model)
    return make_closure("train_step", backend, model, placed, spec), placed, spec, weights


def host(out) -> float:
    """The loss on the host: the end of a step for every contender."""
    return float(np.asarray(out.numpy() if hasattr(out, "numpy") else out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--variant", choices=("function", "xla"), default="function",
                    help="ours: tensorflow backend variant; the direct versions get jit_compile = (variant == xla)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=12, help="timed steps of each, alternating")
    args = ap.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    jit = args.variant == "xla"
    ours, placed, spec, weights = ours_step(args.batch, args.variant)
    x, y = placed["inputs"], placed["y"]
    fns = {"ours": ours}
    for name, make in (("keras_fit", fit_step), ("keras_loop", loop_step)):
        direct = resnet56(spec.input.classes)
        trainable = sum(int(np.prod(v.shape)) for v in direct.trainable_variables)  # BN moving stats are state
        assert trainable == spec.param_count == 853_018, (trainable, spec.param_count)
        load_canonical(direct, weights)
        fns[name] = make(direct, spec.learning_rate, jit, x, y)
    first = {n: host(fn()) for n, fn in fns.items()}  # traces/compiles each; the same function?
    for loss in first.values():
        assert abs(loss - first["ours"]) <= 1e-4 * abs(first["ours"]), first
    interleaved(fns, 2, host)  # warm-up
    t = interleaved(fns, args.rounds, host)
    med = {n: statistics.median(v) for n, v in t.items()}
    print(header(f"tensorflow fidelity: dlbench resnet-56 train_step ({args.variant}) vs ResNet-56 written "
                 "directly in Keras"))
    print(f"- batch {args.batch}, input 32x32 (NHWC), TF {tf.__version__}, Keras {keras.__version__}, "
          f"jit_compile={jit}, {args.threads} intra/inter-op thread(s), {args.rounds} steps each, alternating step "
          f"by step; all {spec.param_count:,} parameters, the same weights, first losses "
          + " / ".join(f"{n} {v:.6f}" for n, v in first.items()))
    labels = {"keras_fit": "Keras compile + train_on_batch", "keras_loop": "Keras model, tf.function custom step",
              "ours": f"dlbench tensorflow ({args.variant})"}
    for n in fns:
        print(f"- {labels[n]}: median {med[n] * 1e3:.1f} ms/step ({args.batch / med[n]:.2f} samples/s)")
    for n in ("keras_fit", "keras_loop"):
        lo, hi = ratio_ci(t[n], t["ours"])
        print(f"- throughput ratio dlbench / {n}: **{med[n] / med['ours']:.3f}** (bootstrap 95% CI "
              f"[{lo:.3f}, {hi:.3f}]; target >= 0.95)")


if __name__ == "__main__":
    main()
