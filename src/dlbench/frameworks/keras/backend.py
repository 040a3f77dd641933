"""Keras 3 backend: the SAME Keras model (:mod:`dlbench.frameworks.keras.keras_model`) on each Keras backend.

Variants ``keras-jax``, ``keras-tensorflow``, ``keras-torch``: Keras picks its backend once, at
import, from ``KERAS_BACKEND``, so each variant runs in its own process with that variable set
(``FrameworkInfo.variant_env``); asking this process for another variant is ``unsupported``.

Fast path = what a Keras user gets:

* ``model.compile(optimizer=keras.optimizers.SGD(lr, momentum=0.9), loss=..., jit_compile=JIT)``, or
  ``keras.optimizers.AdamW(lr, weight_decay, beta_1, beta_2, epsilon)`` (Kingma & Ba's efficient form,
  epsilon not bias-corrected: the gate's ``hat``; decay ``var -= var * wd * lr`` before the step)
  with the loss Keras's ``SparseCategoricalCrossentropy(from_logits=True)`` over a copy of the output
  (``keras_model.LogitsCrossentropy``: on TF a sigmoid output would lend the loss its input), or ``None`` for the
  autoencoders (their MSE against the Mark'd activation is the model's ``compute_loss``).
  ``JIT``: True on JAX (``jax.jit``) and TensorFlow (XLA; Keras's "auto" would turn XLA off on a
  CPU-only TF machine); see :data:`JIT_COMPILE` for torch.
* forward: ``model.predict_on_batch(x)``, Keras's compiled predict step (returns NumPy, so the
  output's copy to the host is part of it, as for every Keras user).
* train_step: ``model.train_on_batch(x, y)`` (returns the loss as a NumPy scalar: it waits).
* gradient, no update, the way the Keras guides write a custom loop on each backend:
  JAX ``jax.jit(jax.value_and_grad(f, has_aux=True))`` over ``model.stateless_call`` +
  ``model.compute_loss``; TensorFlow ``tf.GradientTape`` in ``tf.function(jit_compile=JIT)``;
  torch autograd (``model(x, training=True)``, ``loss.backward()``, ``v.value.grad``).
* layout channels_last (Keras's default; NCHW batches are transposed once in ``place``).
* threads: TF ``tf.config.threading`` intra/inter-op; torch ``set_num_threads`` /
  ``set_num_interop_threads``; JAX (XLA CPU) has no thread setting: only the CPU affinity the
  harness pins limits it.
* sync: ``jax.block_until_ready``; ``tf.test.experimental.sync_devices()``;
  ``torch.cuda.synchronize()`` on CUDA (CPU torch is synchronous).
* compile cache (``DLBENCH_CACHE_DIR``): JAX's persistent compilation cache (every entry, however
  quick to compile), TF's persistent XLA cache, Inductor's cache directory for torch.
* parameter count: Keras's ``count_params()`` minus the batch-norm moving mean and variance.
* precision: Keras's dtype policies (``bfloat16``/``float16``: variables and compute in that type,
  the input cast in ``place``; ``mixed_bfloat16``/``mixed_float16``: float32 variables, compute in
  the low type), set while the layers are made and restored after; at amp-fp16 ``compile`` wraps
  the SGD in ``keras.optimizers.LossScaleOptimizer`` (Keras's dynamic loss scaling; Keras would
  wrap it itself for a ``mixed_float16`` model) and the custom-loop ``gradient`` scales the loss by
  a static 2**12 and divides the gradients by it. The losses are float32 (Keras's loss objects
  cast the prediction to their float32 dtype; the MSE of the autoencoders casts too).
"""

from __future__ import annotations

import contextlib
import os

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.frameworks.cache import cache_dir, set_tf_xla_cache, set_torch_inductor_cache

_requested = os.environ.get("KERAS_BACKEND", "tensorflow")
if _requested == "tensorflow":
    set_tf_xla_cache()
elif _requested == "torch":
    set_torch_inductor_cache()

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from dlbench.data.synthetic import Batch  # noqa: E402
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError  # noqa: E402
from dlbench.frameworks.builder import make_optimizer  # noqa: E402
from dlbench.frameworks.jax.profiler import jax_profile  # noqa: E402
from dlbench.frameworks.keras import DECLARATION  # noqa: E402
from dlbench.frameworks.keras import keras_model as km  # noqa: E402
from dlbench.frameworks.torch.profiler import torch_profile  # noqa: E402
from dlbench.measure.profile import ProfileTrace  # noqa: E402
from dlbench.models.spec import ModelSpec  # noqa: E402
from dlbench.models.split import differentiates_input  # noqa: E402
from dlbench.models.weights import Weights  # noqa: E402

BACKEND = keras.backend.backend()
VARIANT = {"jax": "keras-jax", "tensorflow": "keras-tensorflow", "torch": "keras-torch"}.get(BACKEND)

#: jit_compile per Keras backend. torch: False, Keras's own default there ("auto" means eager on
#: torch). ``jit_compile=True`` wraps Keras's whole train step in ``torch.compile``: on our shared
#: 2-core CPU it compiled LeNet's first step for 150 s, compiled again on the second step (48 s)
#: and then was not measurably faster than eager, so it is not the fast path; flip it here to try.
JIT_COMPILE = {"jax": True, "tensorflow": True, "torch": False}

if BACKEND == "jax":
    import jax

    _jax_cache = cache_dir("jax")
    if _jax_cache:
        jax.config.update("jax_compilation_cache_dir", _jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
elif BACKEND == "tensorflow":
    import tensorflow as tf

    from dlbench.frameworks.tensorflow.tf_util import set_tf_threads, sync_tf, tf_info, tf_profile
elif BACKEND == "torch":
    import torch


class KerasModel:
    """The built Keras model with the device scope its closures run in."""

    def __init__(self, build: km.KerasBuild, device: str, variant: str):
        self.build, self.spec, self.net, self.device, self.variant = build, build.spec, build.model, device, variant
        #: the compiled gradient function (JAX, TensorFlow), made at the first ``gradient``: one made per call
        #: was traced and compiled again each time (the gate calls it six times: a bert-base gate spent 61 of
        #: its 107 s compiling the same gradient in Keras-JAX)
        self.grad_fn: Callable[..., Any] | None = None


def _keras_device(device: str) -> str:
    if device == "cpu":
        return "cpu"
    if device.startswith(("cuda", "gpu")):
        return f"gpu:{device.partition(':')[2] or '0'}"
    raise UnsupportedError(f"keras backend: unknown device {device!r}")


def _scope(device: str):
    """``keras.device`` where there is a choice to make, none on a CPU-only machine. (Keras's torch
    variable is ``Parameter(...).to(device)``: a scope naming "cpu:0" for a "cpu" tensor makes a
    non-leaf copy whose ``.grad`` autograd never fills, hence "cpu".)"""
    return keras.device(device) if _accelerators() else contextlib.nullcontext()


def _accelerators() -> int:
    if BACKEND == "jax":
        return len([d for d in jax.devices() if d.platform != "cpu"])
    if BACKEND == "tensorflow":
        return len(tf.config.list_physical_devices("GPU"))
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _divide(g: Any, scale: float) -> Any:
    """A gradient divided by the loss scale (TF's sparse embedding gradient divided in its values)."""
    if BACKEND == "tensorflow" and isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / scale, g.indices, g.dense_shape)
    return g / scale


def _numpy(a: Any) -> np.ndarray | None:
    if a is None:
        return None
    if isinstance(a, np.ndarray | np.generic | float | int):  # predict_on_batch / train_on_batch give NumPy
        return np.asarray(a)
    if BACKEND == "torch" and isinstance(a, torch.Tensor):
        if a.dtype == torch.bfloat16:  # NumPy has no bfloat16 for torch to convert to: upcast (exact)
            a = a.float()
        return a.detach().cpu().numpy()
    if BACKEND == "tensorflow" and isinstance(a, tf.IndexedSlices):
        a = tf.convert_to_tensor(a)
    return np.asarray(keras.ops.convert_to_numpy(a))


class KerasBackend(km.PolicyPrecision, Backend):
    declaration = DECLARATION
    packages = ("keras", *({"tensorflow": ("tensorflow", "tensorflow-cpu")}.get(BACKEND, (BACKEND,))))
    builder_class = km.Builder
    adamw_eps = "hat"  # keras.optimizers.AdamW on every backend (the torch one through its foreach kernels)

    def set_threads(self, n: int) -> dict[str, Any]:
        if BACKEND == "tensorflow":
            return set_tf_threads(n)
        if BACKEND == "torch":
            torch.set_num_threads(n)
            try:
                torch.set_num_interop_threads(n)
            except RuntimeError:  # already set, or parallel work already started
                pass
            return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
        return {"affinity_cores": len(os.sched_getaffinity(0)),
                "note": "XLA's CPU client has no thread setting; the pinned CPU affinity limits it"}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> KerasModel:
        variant = variant or VARIANT
        if variant not in self.variants:
            raise UnsupportedError(f"keras has no variant {variant!r}")
        if variant != VARIANT:
            raise UnsupportedError(f"variant {variant} needs KERAS_BACKEND={variant[6:]} before Keras is imported; "
                                   f"this process runs Keras on {BACKEND} (dlbench runs each variant in its own process)")
        if device != "cpu" and not _accelerators():
            raise UnsupportedError(f"no accelerator is visible to Keras's {BACKEND} backend")
        dev = _keras_device(device)
        keras.utils.set_random_seed(0)
        with _scope(dev):
            build = km.build_keras_model(spec, weights, self.builder_class(), self.precision)
        self._compile(build, OptimizerSpec())
        return KerasModel(build, dev, variant)

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec) -> keras.optimizers.Optimizer:
        return keras.optimizers.SGD(learning_rate=opt.lr, momentum=opt.momentum)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec) -> keras.optimizers.Optimizer:
        return keras.optimizers.AdamW(learning_rate=opt.lr, weight_decay=opt.weight_decay, beta_1=opt.betas[0],
                                      beta_2=opt.betas[1], epsilon=opt.eps)

    @classmethod
    def _compile(cls, build: km.KerasBuild, opt: OptimizerSpec) -> None:
        optimizer = make_optimizer(cls, opt)
        if build.precision == "amp-fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        build.model.compile(optimizer=optimizer, loss=km.keras_loss(build.spec), jit_compile=JIT_COMPILE[BACKEND])

    def place(self, batch: Batch, model: KerasModel) -> dict[str, Any]:
        inputs = km.keras_inputs(model.spec, batch.x, batch.mask)
        # a cast model (bf16, fp16) takes its float input in its own type
        cast = km.INPUT_DTYPES.get(model.build.precision) if model.spec.input.kind != "tokens" else None
        with _scope(model.device):
            convert = keras.ops.convert_to_tensor
            if isinstance(inputs, dict):
                placed = {k: convert(v, dtype=cast if k == "x" else None) for k, v in inputs.items()}
            else:
                placed = convert(inputs, dtype=cast)
            return {"inputs": placed, "y": None if batch.y is None else convert(batch.y.astype(np.int32))}

    def forward(self, model: KerasModel, batch) -> Callable[[], Any]:
        predict, inputs = model.net.predict_on_batch, batch["inputs"]
        return lambda: predict(inputs)

    def gradient(self, model: KerasModel, batch) -> Callable[[], Any]:
        """The loss and the trainable variables' gradients; a part's input gradient after them
        (``models.split.differentiates_input``), computed as the whole model's backward computes it."""
        net, inputs, y = model.net, batch["inputs"], batch["y"]
        scale = model.build.loss_scale  # amp-fp16: the loss scaled before the backward, the gradients divided after
        with_input = differentiates_input(model.spec)

        def scaled(loss):
            return loss if scale is None else loss * scale

        def unscale(grads: list) -> list:
            return grads if scale is None else [None if g is None else _divide(g, scale) for g in grads]

        if BACKEND == "jax":
            def loss_and_updates(trainable, non_trainable, inputs, y):
                y_pred, non_trainable = net.stateless_call(trainable, non_trainable, inputs, training=True)
                loss = net.compute_loss(x=inputs, y=y, y_pred=y_pred)
                return scaled(loss), (loss, non_trainable)

            @jax.jit
            def grad_fn(trainable, non_trainable, inputs, y):
                (_, (loss, _)), grads = jax.value_and_grad(loss_and_updates, argnums=(0, 2) if with_input else 0,
                                                           has_aux=True)(trainable, non_trainable, inputs, y)
                return loss, unscale([*grads[0], grads[1]] if with_input else grads)
            model.grad_fn = model.grad_fn or grad_fn  # the variables' present values are its arguments
            compiled = model.grad_fn
            trainable = [v.value for v in net.trainable_variables]
            non_trainable = [v.value for v in net.non_trainable_variables]
            return lambda: compiled(trainable, non_trainable, inputs, y)

        if BACKEND == "tensorflow":
            weights = net.trainable_variables

            @tf.function(jit_compile=JIT_COMPILE[BACKEND], autograph=False)
            def tf_grads(inputs, y):
                with tf.GradientTape() as tape:  # the scaled loss made inside the tape, so it is recorded
                    if with_input:
                        tape.watch(inputs)
                    loss = net.compute_loss(x=inputs, y=y, y_pred=net(inputs, training=True))
                    target = scaled(loss)
                return loss, unscale(tape.gradient(target, [*weights, inputs] if with_input else weights))
            model.grad_fn = model.grad_fn or tf_grads  # reads the variables themselves: traced once
            compiled = model.grad_fn
            return lambda: compiled(inputs, y)

        weights = net.trainable_variables
        if with_input:
            inputs.requires_grad_(True)

        def run_torch():
            # each variable's gradient cleared: until the model's first train_on_batch, ``net.zero_grad()``
            # finds no torch parameters to clear, and each call added its gradient to the last one's
            for v in weights:
                v.value.grad = None
            if with_input:
                inputs.grad = None
            loss = net.compute_loss(x=inputs, y=y, y_pred=net(inputs, training=True))
            scaled(loss).backward()
            return loss, unscale([v.value.grad for v in weights] + ([inputs.grad] if with_input else []))
        return run_torch

    def train_step(self, model: KerasModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        self._compile(model.build, opt)  # a fresh optimiser: its momentum (or moments) start at zero
        train, inputs, y = model.net.train_on_batch, batch["inputs"], batch["y"]
        return lambda: train(inputs, y)

    def trainer(self, model: KerasModel, opt: OptimizerSpec) -> Callable[[Any], Any]:
        """``model.train_on_batch`` on each new batch (Keras's compiled train step, a fresh optimiser)."""
        self._compile(model.build, opt)
        train = model.net.train_on_batch
        return lambda batch: train(batch["inputs"], batch["y"])

    def predictor(self, model: KerasModel) -> Callable[[Any], Any]:
        """``model.predict_on_batch`` (Keras's compiled predict step, inference mode)."""
        predict = model.net.predict_on_batch
        return lambda batch: predict(batch["inputs"])

    def sync(self, out: Any) -> None:
        if BACKEND == "jax":
            jax.block_until_ready(out)
        elif BACKEND == "tensorflow":
            sync_tf()
        elif torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """The profiler of the framework Keras runs on: its closures are that framework's calls."""
        if BACKEND == "jax":
            return jax_profile(run, calls, outdir)
        if BACKEND == "tensorflow":
            return tf_profile(run, calls, outdir)
        return torch_profile(run, calls, outdir)

    def to_numpy(self, out: Any) -> np.ndarray:
        """The output as NumPy; a bfloat16/float16 one upcast (exactly) to float32."""
        if isinstance(out, tuple | list):
            out = out[0]
        out = _numpy(out)
        return out.astype(np.float32) if out.dtype.name in ("bfloat16", "float16") else out

    def param_count(self, model: KerasModel) -> int:
        return km.param_count(model.build)

    def get_params(self, model: KerasModel) -> dict[str, np.ndarray]:
        return km.get_params(model.build)

    def loss_and_grads(self, model: KerasModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.gradient(model, batch)()  # a part's input gradient, last, is not a parameter's
        grads = grads[:len(model.net.trainable_variables)]
        return float(_numpy(loss)), km.grads_to_canonical(model.build, [_numpy(g) for g in grads])

    def peak_device_memory(self, device: str) -> dict[str, int]:
        if device == "cpu" or not _accelerators():
            return {}
        if BACKEND == "torch":
            return {"allocator_peak_bytes": int(torch.cuda.max_memory_allocated())}
        if BACKEND == "tensorflow":
            index = device.partition(":")[2] or "0"
            return {"allocator_peak_bytes": int(tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"])}
        stats = jax.devices()[0].memory_stats() or {}
        return {"allocator_peak_bytes": int(stats["peak_bytes_in_use"])} if "peak_bytes_in_use" in stats else {}

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"keras": keras.__version__, "keras_backend": BACKEND,
                               "jit_compile": JIT_COMPILE.get(BACKEND)}
        if BACKEND == "jax":
            import jaxlib

            out.update(jax=jax.__version__, jaxlib=jaxlib.__version__, devices=[str(d) for d in jax.devices()],
                       compilation_cache_dir=jax.config.jax_compilation_cache_dir)
        elif BACKEND == "tensorflow":
            out.update(tf_info())
            out["xla_cache_dir"] = cache_dir("tf_xla")
        elif BACKEND == "torch":
            out.update(torch=torch.__version__, mkldnn=torch.backends.mkldnn.is_available(),
                       cuda=torch.version.cuda,
                       inductor_cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR") if JIT_COMPILE["torch"] else None)
        return out


Backend_ = KerasBackend
