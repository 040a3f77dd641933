"""TensorFlow backend: the shared Keras 3 model (:mod:`dlbench.frameworks.keras.keras_model`) run by TensorFlow.

Fast path and fairness settings:

* Keras 3 on its TensorFlow backend (``KERAS_BACKEND=tensorflow`` is forced before Keras is
  imported); float32; channels_last (TF's fast CPU layout; NCHW batches are transposed once in
  ``place``, outside timing); oneDNN as the TF build enables it (``TF_ENABLE_ONEDNN_OPTS``,
  reported by ``info``).
* variants: ``function`` (the model's call inside ``tf.function``, graph mode, no XLA) and
  ``xla`` (``tf.function(jit_compile=True)``). Each closure's function is traced once per model
  and input signature. Keras itself runs a *grouped* convolution through a nested XLA function on
  TF (its CPU kernel lacks groups), so AlexNet's grouped layers use XLA even in ``function``.
* forward: ``model(inputs, training=False)``; gradient: ``tf.GradientTape`` over the mean softmax
  cross-entropy from logits (``tf.nn.sparse_softmax_cross_entropy_with_logits``) or the mean
  squared error, returning the loss and every trainable variable's gradient (embedding gradients
  stay ``IndexedSlices``, TF's native form), no update.
* train_step: the same gradient plus SGD with momentum in one ``tf.function``, using
  ``tf.raw_ops.ResourceApplyMomentum`` (TF's fused kernel, one op per variable; the update is
  ``accum = momentum * accum + grad; var -= lr * accum``, PyTorch's form; XLA compiles it too).
  Chosen over ``keras.optimizers.SGD`` because Keras's optimizer is backend-neutral Python that
  emits several element-wise ops and assignments per variable plus an iteration counter, which
  graph mode without XLA runs unfused. Sparse embedding gradients are densified first, so the
  momentum of untouched rows decays as in PyTorch. AdamW the same way: ``tf.raw_ops.ResourceApplyAdam``
  (TF's fused Adam kernel, Kingma & Ba's efficient form ``lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)``,
  ``var -= lr_t m / (sqrt(v) + eps)``: the gate's ``hat`` epsilon) after the decoupled weight decay
  ``var -= lr * wd * var`` (TF has no fused AdamW kernel; Keras's ``AdamW`` decays the same way).
* threads: ``tf.config.threading.set_intra_op_parallelism_threads(n)`` and
  ``set_inter_op_parallelism_threads(n)`` before the first op (the harness also pins affinity).
* sync: ``tf.test.experimental.sync_devices()``, TF's documented benchmark barrier (GPU kernels
  run asynchronously; CPU eager execution is synchronous unless made otherwise).
* compile cache: with ``DLBENCH_CACHE_DIR`` set, TF's persistent XLA cache
  (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``) lives in ``$DLBENCH_CACHE_DIR/tf_xla``
  (used by the ``xla`` variant; graph-mode ``tf.function`` has no persistent cache).
* parameter count: Keras's ``count_params()`` minus the batch-norm moving mean and variance
  (Keras counts them as non-trainable weights; the spec counts them as state).
* precision: ``fp32``, ``bf16``/``fp16`` (Keras dtype policy ``bfloat16``/``float16``: variables
  and compute in that type, the input cast in ``place``) and ``amp-bf16``/``amp-fp16`` (policies
  ``mixed_bfloat16``/``mixed_float16``: float32 variables, each layer casting them and its input
  to the low type), set while the layers are made and restored after
  (:func:`keras_model.dtype_policy`). The loss is computed in float32 (logits upcast). amp-fp16's
  gradient and training step scale the loss by a static 2**12 and divide the gradients by it before
  the fused momentum update. int8 is unsupported (:func:`keras_model.unsupported_reason`).
* CUDA: written the standard way (``/GPU:0`` placement, ``get_memory_info`` peak) but untested
  unless a GPU run is recorded in the docs.
"""

from __future__ import annotations

import os
import sys

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.frameworks.cache import set_tf_xla_cache

if "keras" not in sys.modules:
    os.environ["KERAS_BACKEND"] = "tensorflow"
XLA_CACHE = set_tf_xla_cache()

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dlbench.data.synthetic import Batch  # noqa: E402
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError  # noqa: E402
from dlbench.frameworks.builder import make_optimizer  # noqa: E402
from dlbench.frameworks.keras import keras_model as km  # noqa: E402
from dlbench.frameworks.tensorflow import DECLARATION  # noqa: E402
from dlbench.frameworks.tensorflow.tf_util import set_tf_threads, sync_tf, tf_device, tf_info, tf_profile  # noqa: E402
from dlbench.measure.profile import ProfileTrace  # noqa: E402
from dlbench.models.spec import ModelSpec  # noqa: E402
from dlbench.models.split import differentiates_input  # noqa: E402
from dlbench.models.weights import Weights  # noqa: E402

if keras.backend.backend() != "tensorflow":  # pragma: no cover - only when keras was imported first
    raise ImportError(f"the tensorflow backend needs Keras on TensorFlow, but Keras runs on {keras.backend.backend()}")


def _divide(g: Any, scale: float) -> Any:
    """A gradient divided by the loss scale (a sparse embedding gradient divided in its values)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / scale, g.indices, g.dense_shape)
    return g / scale


class TFModel:
    """The built Keras model with its device and the traced functions its closures share."""

    def __init__(self, build: km.KerasBuild, device: str, variant: str):
        self.build, self.spec, self.net = build, build.spec, build.model
        self.device, self.variant = device, variant
        self.jit = variant == "xla"
        self.trainable = list(self.net.trainable_variables)
        net, spec, dev, trainable = self.net, self.spec, device, self.trainable

        def loss_of(inputs, y):  # in float32 whatever the compute type (the mixed-precision recipe)
            if spec.loss.kind == "mse":
                out, target = (tf.cast(t, tf.float32) for t in net(inputs, training=True))
                return tf.reduce_mean(tf.square(out - target))
            logits = tf.cast(net(inputs, training=True), tf.float32)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        scale = build.loss_scale

        def scaled_grads(inputs, y, with_input=False):
            """``(loss, gradients)``; under amp-fp16 the tape differentiates ``loss * scale`` (the
            product made inside the tape, so it is recorded) and the gradients are divided by it.
            ``with_input``: the input's gradient too, last (a part after the first, models/split.py)."""
            with tf.GradientTape() as tape:
                if with_input:
                    tape.watch(inputs)
                loss = loss_of(inputs, y)
                target = loss if scale is None else loss * scale
            grads = tape.gradient(target, [*trainable, inputs] if with_input else trainable)
            return loss, grads if scale is None else [_divide(g, scale) for g in grads]

        def infer(inputs):
            with tf.device(dev):
                return net(inputs, training=False)

        with_input = differentiates_input(spec)

        def loss_and_grads(inputs, y):
            with tf.device(dev):
                return scaled_grads(inputs, y, with_input)

        self.loss_of, self.scaled_grads = loss_of, scaled_grads
        self.infer_fn = tf.function(infer, jit_compile=self.jit, autograph=False)
        self.grad_fn = tf.function(loss_and_grads, jit_compile=self.jit, autograph=False)


def fused_update(trainable: list, opt: OptimizerSpec, dev: str) -> tuple[Callable[[list], None], list]:
    """``update(grads)``, applying ``opt`` to ``trainable`` with TF's fused kernels, and its state: fresh
    (zero) variables (SGD: one momentum buffer per variable; AdamW: both moments, then the step count):
    the backend's rules (:func:`make_optimizer`), made on ``dev``."""
    with tf.device(dev):
        return make_optimizer(TensorFlowBackend, opt, trainable)


def _zeros(trainable: list) -> list:
    return [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in trainable]


def fused_sgd(opt: OptimizerSpec, trainable: list) -> tuple[Callable[[list], None], list]:
    accums, lr, momentum = _zeros(trainable), tf.constant(opt.lr, tf.float32), tf.constant(opt.momentum, tf.float32)

    def sgd(grads: list) -> None:
        for var, accum, grad in zip(trainable, accums, grads, strict=True):  # lr in the variable's type
            tf.raw_ops.ResourceApplyMomentum(var=var.handle, accum=accum.handle, lr=tf.cast(lr, var.dtype),
                                             grad=tf.convert_to_tensor(grad), momentum=tf.cast(momentum, var.dtype))
    return sgd, accums


def fused_adamw(opt: OptimizerSpec, trainable: list) -> tuple[Callable[[list], None], list]:
    ms, vs, t = _zeros(trainable), _zeros(trainable), tf.Variable(0.0, trainable=False, dtype=tf.float32)
    lr, (b1, b2) = tf.constant(opt.lr, tf.float32), (tf.constant(b, tf.float32) for b in opt.betas)
    eps, decay = tf.constant(opt.eps, tf.float32), tf.constant(opt.lr * opt.weight_decay, tf.float32)

    def adamw(grads: list) -> None:
        step = t.assign_add(1.0)
        b1_power, b2_power = tf.pow(b1, step), tf.pow(b2, step)
        for var, m, v, grad in zip(trainable, ms, vs, grads, strict=True):
            dtype = var.dtype
            if opt.weight_decay:
                var.assign_sub(tf.cast(decay, dtype) * var)
            tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle,
                                         beta1_power=tf.cast(b1_power, dtype), beta2_power=tf.cast(b2_power, dtype),
                                         lr=tf.cast(lr, dtype), beta1=tf.cast(b1, dtype), beta2=tf.cast(b2, dtype),
                                         epsilon=tf.cast(eps, dtype), grad=tf.convert_to_tensor(grad))
    return adamw, [*ms, *vs, t]


class TensorFlowBackend(km.PolicyPrecision, Backend):
    declaration = DECLARATION
    adamw_eps = "hat"
    #: the optimisers, TF's fused kernels (:func:`fused_update`)
    optimizer_sgd = staticmethod(fused_sgd)
    optimizer_adamw = staticmethod(fused_adamw)
    packages = ("tensorflow", "tensorflow-cpu", "keras")  # distributions; the one installed is recorded
    builder_class = km.Builder

    def set_threads(self, n: int) -> dict[str, Any]:
        return set_tf_threads(n)

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> TFModel:
        variant = variant or self.variants[0]
        if variant not in self.variants:
            raise UnsupportedError(f"tensorflow has no variant {variant!r}")
        dev = tf_device(device)
        keras.utils.set_random_seed(0)
        with tf.device(dev):
            build = km.build_keras_model(spec, weights, self.builder_class(), self.precision)
        return TFModel(build, dev, variant)

    def place(self, batch: Batch, model: TFModel) -> dict[str, Any]:
        inputs = km.keras_inputs(model.spec, batch.x, batch.mask)
        cast = km.INPUT_DTYPES.get(model.build.precision)
        with tf.device(model.device):
            inputs = tf.nest.map_structure(tf.constant, inputs)
            if cast and model.spec.input.kind != "tokens":  # a cast model takes its input in its own type
                if isinstance(inputs, dict):
                    inputs = {**inputs, "x": tf.cast(inputs["x"], cast)}
                else:
                    inputs = tf.cast(inputs, cast)
            return {"inputs": inputs,
                    "y": None if batch.y is None else tf.constant(batch.y.astype(np.int32))}

    def forward(self, model: TFModel, batch) -> Callable[[], Any]:
        infer, inputs = model.infer_fn, batch["inputs"]
        return lambda: infer(inputs)

    def gradient(self, model: TFModel, batch) -> Callable[[], Any]:
        fn, inputs, y = model.grad_fn, batch["inputs"], batch["y"]
        return lambda: fn(inputs, y)

    @staticmethod
    def step_body(model: TFModel, opt: OptimizerSpec,
                  reduce_grads: Callable[[list], list] | None = None) -> tuple[Callable[[Any, Any], Any], list]:
        """The training step as a plain function ``(inputs, y) -> loss`` (GradientTape gradient +
        :func:`fused_update`), and the optimiser's state variables (fresh: zero). ``train_step`` and
        ``trainer`` wrap it in one ``tf.function``. The TensorFlow data-parallel worker
        (:mod:`dlbench.frameworks.tensorflow.dp_worker`) makes model and body under its strategy's scope (so
        variables and buffers are mirrored), passes ``reduce_grads`` (the replica context's all-reduce
        mean, applied between the gradient and the update) and runs the body with ``strategy.run``:
        its model is this backend's, not a second one."""
        scaled_grads, dev = model.scaled_grads, model.device
        update, slots = fused_update(model.trainable, opt, dev)

        def step(inputs, y):
            with tf.device(dev):
                loss, grads = scaled_grads(inputs, y)
                if reduce_grads is not None:
                    grads = reduce_grads(grads)
                update(grads)
                return loss

        return step, slots

    @classmethod
    def _step_fn(cls, model: TFModel, opt: OptimizerSpec, reduce_retracing: bool = False):
        """:meth:`step_body` as one ``tf.function``; the optimiser's state is owned by it."""
        step, _ = cls.step_body(model, opt)
        return tf.function(step, jit_compile=model.jit, autograph=False, reduce_retracing=reduce_retracing)

    def train_step(self, model: TFModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        fn = self._step_fn(model, opt)
        inputs, y = batch["inputs"], batch["y"]
        return lambda: fn(inputs, y)

    def trainer(self, model: TFModel, opt: OptimizerSpec) -> Callable[[Any], Any]:
        """``train_step``'s function with the batch as its argument; ``reduce_retracing`` lets a
        new batch shape (token batches cut to their longest sequence) reuse a generalised trace."""
        fn = self._step_fn(model, opt, reduce_retracing=True)
        return lambda batch: fn(batch["inputs"], batch["y"])

    def predictor(self, model: TFModel) -> Callable[[Any], Any]:
        """``forward``'s inference call (``training=False``: moving BN statistics, no dropout)."""
        net, dev = model.net, model.device

        def infer(inputs):
            with tf.device(dev):
                return net(inputs, training=False)

        fn = tf.function(infer, jit_compile=model.jit, autograph=False, reduce_retracing=True)
        return lambda batch: fn(batch["inputs"])

    def sync(self, out: Any) -> None:
        sync_tf()

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        return tf_profile(run, calls, outdir)

    def to_numpy(self, out: Any) -> np.ndarray:
        if isinstance(out, tuple | list):
            out = out[0]
        out = np.asarray(out.numpy() if hasattr(out, "numpy") else out)
        return out.astype(np.float32) if out.dtype.name in ("bfloat16", "float16") else out

    def param_count(self, model: TFModel) -> int:
        return km.param_count(model.build)

    def get_params(self, model: TFModel) -> dict[str, np.ndarray]:
        return km.get_params(model.build)

    def loss_and_grads(self, model: TFModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.gradient(model, batch)()  # the timed closure: a part's input gradient too, last
        dense = [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads[:len(model.trainable)]]
        return float(loss.numpy()), km.grads_to_canonical(model.build, dense)

    def peak_device_memory(self, device: str) -> dict[str, int]:
        if device.startswith(("cuda", "gpu")) and tf.config.list_physical_devices("GPU"):
            index = device.partition(":")[2] or "0"
            return {"allocator_peak_bytes": int(tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"])}
        return {}

    def info(self) -> dict[str, Any]:
        return {**tf_info(), "xla_cache_dir": XLA_CACHE}


Backend_ = TensorFlowBackend
