"""The contract every framework backend fulfils.

A backend builds a :class:`~dlbench.models.spec.ModelSpec` with the framework's own standard
layers, loads canonical weights into it, and hands out closures over data already on the
device, so a timer around a closure measures compute, not data movement. The closures:

* ``forward``: a batch to the network's output, inference mode (no autograd, eval-mode BN).
* ``gradient``: forward + loss + backward, every parameter's gradient, no update.
* ``train_step``: gradient + the optimiser's update (:class:`OptimizerSpec`: SGD with momentum, or AdamW).

The mode (train/eval) a closure needs is set when the closure is made.

Conventions every backend follows:

* the backend module imports its framework at module level; it is imported only inside the
  measuring process, after the CPU affinity and thread variables are set;
* float32 everywhere; canonical layouts are converted at ``build`` (and back in ``get_params``
  and ``loss_and_grads``), never inside a timed closure;
* if ``DLBENCH_CACHE_DIR`` is set, the framework's persistent compilation cache (where it has
  one) lives there, so the ``compile`` scenario can time a cold and a warm first call;
* the module docstring lists the fast-path settings (jit scope, layout, donation, threads).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.data.synthetic import Batch
from dlbench.frameworks.declaration import Declaration
from dlbench.measure.profile import ProfileTrace
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


class UnsupportedError(Exception):
    """The framework cannot express this model or scenario; the message says exactly why."""


#: the optimisers a training closure applies (dlbench.gate.reference_optim holds their float64 definitions)
OPTIMIZERS = ("sgd", "adamw")
#: AdamW's learning rate when none is given: transformers' ``TrainingArguments`` default (with betas
#: (0.9, 0.999), eps 1e-8 and weight decay 0, the defaults here too)
ADAMW_LR = 5e-5


@dataclass(frozen=True)
class OptimizerSpec:
    """The update of a training step. ``sgd``: SGD with momentum in PyTorch's form (``buf = momentum *
    buf + g; p -= lr * buf``), the optimiser of every paper's training runs. ``adamw``: Adam with
    bias correction and decoupled weight decay (Loshchilov & Hutter; ``p -= lr * wd * p`` beside the
    Adam step, as ``torch.optim.AdamW``, ``optax.adamw`` and ``keras.optimizers.AdamW`` apply it), the
    optimiser transformers are trained with; ``betas``, ``eps`` and ``weight_decay`` are its alone."""

    lr: float = 0.01
    momentum: float = 0.9
    name: str = "sgd"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    @classmethod
    def from_settings(cls, settings: dict[str, Any], model_lr: float, lr: float | None = None) -> OptimizerSpec:
        """The optimiser a job's settings name (every field of ``dlbench.planning.suite.OptimizerModel``, validated
        where the suite was made), for a model whose paper trains at ``model_lr``; ``lr`` (a scenario's
        own, such as convergence's) wins over the settings'. An unset rate is SGD's ``model_lr`` or
        AdamW's :data:`ADAMW_LR`."""
        name = settings["name"]
        rate = lr or settings["lr"] or (ADAMW_LR if name == "adamw" else model_lr)
        return cls(lr=float(rate), momentum=float(settings["momentum"]), name=name,
                   betas=(float(settings["betas"][0]), float(settings["betas"][1])), eps=float(settings["eps"]),
                   weight_decay=float(settings["weight_decay"]))

    def describe(self) -> dict[str, Any]:
        """What a cell records of its optimiser: the settings that apply to it."""
        if self.name == "sgd":
            return {"name": "sgd", "lr": self.lr, "momentum": self.momentum}
        return {"name": self.name, "lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                "weight_decay": self.weight_decay}


class Backend(ABC):
    #: the framework folder's declaration (``dlbench/frameworks/NAME/__init__.py``); a subclass that sets it
    #: takes its name, variants, devices, closures and precisions from it: the declaration is their one source
    declaration: ClassVar[Declaration | None] = None
    name: str = ""
    variants: tuple[str, ...] = ("default",)
    devices: tuple[str, ...] = ("cpu",)
    #: the closures the backend hands out (dlbench.frameworks.declaration.CLOSURES; scenarios name the ones
    #: they need, ``Scenario.requires``); an inference engine has ("forward",) and the gate then checks
    #: parameters and forward only
    closures: tuple[str, ...] = ("forward", "gradient", "train_step")
    #: import names whose versions are recorded with every result
    packages: tuple[str, ...] = ()
    #: what ``forward`` returns: ``logits`` (the spec's output), or ``probabilities`` for an API that
    #: only returns class probabilities (H2O's predict); the gate then compares the reference's softmax
    output: str = "logits"
    #: why the gate checks only the forward, for a backend without ``gradient`` (None: the default text)
    forward_only_reason: str | None = None
    #: the precisions (dlbench.core.precision) the backend can build at; the cell's is set before ``build``
    precisions: tuple[str, ...] = (DEFAULT_PRECISION,)
    #: where the framework's AdamW puts epsilon (dlbench.gate.reference_optim.EPS_FORMS): ``corrected``,
    #: ``m_hat / (sqrt(v_hat) + eps)`` (PyTorch, Optax, Paddle), or ``hat``, Kingma & Ba's efficient form
    #: ``lr_t * m / (sqrt(v) + eps)`` with the bias corrections folded into ``lr_t`` (Keras, TensorFlow's
    #: fused op, MXNet, Chainer); the gate's update check holds it to the one it declares
    adamw_eps: str = "corrected"
    #: sizes the framework's kernels need in a zoo model's small form, the gate's (dlbench.models.gate_form):
    #: ONNX Runtime GenAI's CPU attention takes head sizes that are multiples of 16 only
    gate_form: Mapping[str, Any] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        d = cls.__dict__.get("declaration")
        if d is not None:
            cls.name, cls.variants, cls.devices, cls.precisions = d.name, d.variants, d.devices, d.precisions
            cls.closures = d.closures

    # --- set-up -----------------------------------------------------------------
    @abstractmethod
    def set_threads(self, n: int) -> dict[str, Any]:
        """Limit the framework to ``n`` threads before its first op; return what it reports."""

    def set_precision(self, precision: str) -> None:
        """Build at ``precision`` from now on (dlbench.core.precision names); called before ``build``.
        Raise :class:`UnsupportedError` with the reason for one the framework cannot run."""
        if precision != DEFAULT_PRECISION:
            raise UnsupportedError(f"{self.name} has no {precision} path in dlbench")

    def precision_info(self, model: Any) -> dict[str, str]:
        """The types the framework itself reports for the built model: ``param_dtype`` (its
        parameters' storage) and ``compute_dtype`` (its layers' activations), as numpy names them
        ("float32", "bfloat16", "float16", "int8"); the gate checks them against the precision asked."""
        return {"param_dtype": "float32", "compute_dtype": "float32"}

    @abstractmethod
    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> Any:
        """The spec as a framework model holding ``weights`` (converted from canonical layout)."""

    @abstractmethod
    def place(self, batch: Batch, model: Any) -> Any:
        """The batch on the model's device, in the framework's tensor type."""

    # --- the measured closures -----------------------------------------------------
    @abstractmethod
    def forward(self, model: Any, batch: Any) -> Callable[[], Any]: ...

    @abstractmethod
    def gradient(self, model: Any, batch: Any) -> Callable[[], Any]: ...

    @abstractmethod
    def train_step(self, model: Any, batch: Any, opt: OptimizerSpec) -> Callable[[], Any]:
        """One step of ``opt`` per call; making a closure starts a fresh optimiser state (zero momentum
        or moments, step count 0). A backend without ``opt.name`` raises :class:`UnsupportedError`."""

    # --- whole-data-set closures (frameworks that cannot time one batch; see dlbench.scenarios) ---
    def epoch(self, model: Any, batch: Any, opt: OptimizerSpec) -> Callable[[], Any]:
        """One training epoch over every sample of ``batch`` (a data set of ``batch.size`` samples)."""
        raise UnsupportedError(f"{self.name} times single batches; it has no whole-epoch scenario")

    def predict(self, model: Any, batch: Any) -> Callable[[], Any]:
        """Scoring every sample of ``batch`` through the framework's prediction API."""
        raise UnsupportedError(f"{self.name} times single batches; it has no whole-data-set prediction scenario")

    def build_compile_ns(self, model: Any) -> dict[str, float]:
        """Compilation done while building (ONNX Runtime's session creation), by step, for the compile scenario."""
        return {}

    def build_info(self, model: Any) -> dict[str, Any]:
        """How this model was built, where that can differ between builds (ONNX Runtime: the exporter
        used and the export and session times); the gate records it with its verdict."""
        return {}

    def call_samples(self, placed: Any) -> int | None:
        """Samples one call processes when that is not the whole batch (H2O caps its frames); None: the batch."""
        return None

    def cell_metrics(self, model: Any) -> dict[str, Any]:
        """What the framework itself reported about the timed calls (e.g. H2O's own samples/s)."""
        return {}

    @abstractmethod
    def sync(self, out: Any) -> None:
        """Block until the device has finished computing ``out``."""

    @abstractmethod
    def to_numpy(self, out: Any) -> np.ndarray: ...

    # --- introspection for the equivalence gate --------------------------------------
    @abstractmethod
    def param_count(self, model: Any) -> int:
        """The framework's own count of the model's parameters."""

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        """Parameters the framework's layers have beyond the spec's, and why (documented)."""
        return 0, ""

    @abstractmethod
    def get_params(self, model: Any) -> dict[str, np.ndarray]:
        """Current parameters in canonical layout."""

    @abstractmethod
    def loss_and_grads(self, model: Any, batch: Any) -> tuple[float, dict[str, np.ndarray]]:
        """Training-mode loss and the gradients of the trainable parameters, canonical layout."""

    # --- training over a data set (the convergence scenario) ---------------------------------
    def trainer(self, model: Any, opt: OptimizerSpec) -> Callable[[Any], Any]:
        """``step(placed_batch) -> loss``: one step of ``opt`` on a new batch each call, the
        optimiser state carried from call to call (the timed closures are over one fixed batch)."""
        raise UnsupportedError(f"{self.name} has no trainer for the convergence scenario yet")

    def predictor(self, model: Any) -> Callable[[Any], Any]:
        """``predict(placed_batch) -> output`` in inference mode (eval-mode BN, no dropout)."""
        raise UnsupportedError(f"{self.name} has no predictor for the convergence scenario yet")

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """``calls`` calls of ``run``, each synced, under the framework's own profiler, its Chrome trace
        written in ``outdir`` (dlbench.measure.profile); made after the timed calls, never during them."""
        raise UnsupportedError(f"{self.name} has no profiler wired into dlbench")

    def peak_device_memory(self, device: str) -> dict[str, int]:
        """Allocator peak on an accelerator, in bytes; empty on the CPU."""
        return {}

    def info(self) -> dict[str, Any]:
        """Build facts worth recording (BLAS, oneDNN, CUDA)."""
        return {}


class InferenceOnly:
    """The training side of an inference runtime's backend: each training closure refused with the reason
    ``not_trainable`` says (mixed in before :class:`Backend`, so the runtimes share one refusal)."""

    not_trainable: str = ""

    def gradient(self, model: Any, batch: Any) -> Callable[[], Any]:
        raise UnsupportedError(self.not_trainable)

    def train_step(self, model: Any, batch: Any, opt: OptimizerSpec) -> Callable[[], Any]:
        raise UnsupportedError(self.not_trainable)

    def loss_and_grads(self, model: Any, batch: Any) -> tuple[float, dict[str, np.ndarray]]:
        raise UnsupportedError(self.not_trainable)
