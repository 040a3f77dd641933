"""What a framework folder declares about itself, as plain data.

Each framework is one package, ``dlbench/frameworks/<name>/`` (or a plug-in's own package, registered
through the ``dlbench.frameworks`` entry-point group). Its ``__init__.py`` holds one
:class:`Declaration` named ``DECLARATION`` and imports nothing but this module, so the registry can
answer "which variants, devices, closures, precisions and parts does this framework have" in a process
that cannot import the framework (it is not installed here, lives in its own environment, or must not
be imported before the thread count is pinned).

The parts are modules inside the folder, named relative to it; a part that is ``None`` does not exist
and the scenarios that need it are unsupported for the framework, with the reason the registry gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dlbench.envs.companions import Line as ReleaseLine

__all__ = ["CLOSURES", "RUNS_IN", "DP_LAUNCHERS", "PROBE_CHECKS", "CompilationCache", "Declaration", "ReleaseLine"]

#: the closures a backend can hand out (dlbench.frameworks.base.Backend); scenarios name the ones they need
CLOSURES = ("forward", "gradient", "train_step", "epoch", "predict")
#: where a framework runs: dlbench's own Python, or an environment of its own (dlbench envs create NAME)
RUNS_IN = ("main", "env")
#: how a framework's data-parallel workers start (dlbench.distributed.scaling): under torchrun's agents (which
#: set the rendezvous), or as plain processes that find each other through a coordinator address
DP_LAUNCHERS = ("processes", "torchrun")
#: the survey's live checks a probe may define (dlbench.survey.live_checks runs and judges them)
PROBE_CHECKS = ("forward", "onnx_export", "train", "allreduce")


@dataclass(frozen=True)
class CompilationCache:
    """A variant's compiler with a persistent cache, and the environment that points it at a directory
    (``{dir}`` in a value stands for it): dlbench.measure.reuse offers it to timed cells' processes."""

    compiler: str
    env: Mapping[str, str]


@dataclass(frozen=True)
class Declaration:
    """One framework: what it is and what its folder offers. Literal data only."""

    #: the name users type (``--framework torch``)
    name: str
    #: the pip distribution whose presence and version are reported; a tuple lists alternatives
    #: (``onnxruntime`` or ``onnxruntime-gpu``), the first one installed wins
    distribution: str | tuple[str, ...]
    #: the module the framework is imported as
    import_name: str
    description: str
    #: where the registry lists it: lower first, ties by name (the built-ins: the main Python's first)
    order: int = 100
    variants: tuple[str, ...] = ("default",)
    #: devices the backend builds on; ``cuda`` also admits ``cuda:N``
    devices: tuple[str, ...] = ("cpu",)
    #: the closures its backend offers (:data:`CLOSURES`); an inference engine offers ``("forward",)``
    closures: tuple[str, ...] = ("forward", "gradient", "train_step")
    #: precisions (dlbench.core.precision) its backend builds at
    precisions: tuple[str, ...] = ("fp32",)
    #: ``main``: dlbench's own Python; ``env``: usually an environment of its own, built from ``recipes``
    runs_in: str = "main"
    #: other import names the backend needs (onnxruntime's models are exported from torch)
    requires: tuple[str, ...] = ()
    #: environment a variant needs before the framework is imported (e.g. KERAS_BACKEND)
    variant_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: per-batch closure -> the whole-data-set closure measured in its place (H2O: train_step -> epoch)
    stands_in: Mapping[str, str] = field(default_factory=dict)
    #: variant -> its compiler's persistent cache (none: the variant compiles afresh in each process)
    compilation_caches: Mapping[str, CompilationCache] = field(default_factory=dict)
    #: the parts, as ``module`` or ``module:Class`` relative to the folder; None: the folder has no such part
    backend: str = "backend:Backend_"
    decoder: str | None = None
    #: why there is no decoder, when that is worth saying (None: the registry's default reason)
    no_decoder: str | None = None
    dp_worker: str | None = None
    #: how its data-parallel workers start (:data:`DP_LAUNCHERS`)
    dp_launcher: str = "processes"
    #: the parameter server's worker side (a module with ``load_params(model, params)``): the server's
    #: workers build the model with this framework's backend and load each pull with it
    parameter_server: str | None = None
    probe: str | None = None
    #: the live checks ``probe`` defines (:data:`PROBE_CHECKS`), read without importing it; the probe module
    #: maps each to its function in ``CHECKS``
    probe_checks: tuple[str, ...] = ()
    #: its GEMM for the machine's peak (a module with ``measure(threads, flags)``, dlbench.measure.peak), and
    #: the other import names that GEMM needs (ONNX Runtime's one-node graph is built with onnx)
    gemm: str | None = None
    gemm_requires: tuple[str, ...] = ()
    #: the release lines a pinned version (``jax==0.4.38``) builds its environment from, oldest first, each
    #: with its companion pins (none: its version cannot be pinned), and why releases before the first are
    #: refused; the pin installs the first of ``distribution``
    release_lines: tuple[ReleaseLine, ...] = ()
    releases_before: str = ""
    #: requirement files in the folder (``requirements.txt``, its ``.lock``; ``*.build.txt`` constrains an sdist's build)
    recipes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [c for c in self.closures if c not in CLOSURES]
        if bad or self.runs_in not in RUNS_IN or not self.name or not self.variants:
            raise ValueError(f"framework declaration {self.name!r}: closures must be among {CLOSURES} "
                             f"(got {bad}), runs_in one of {RUNS_IN} (got {self.runs_in!r}), name and variants set")
        if self.dp_launcher not in DP_LAUNCHERS:
            raise ValueError(f"framework declaration {self.name!r}: dp_launcher must be one of {DP_LAUNCHERS}")
        checks = [c for c in self.probe_checks if c not in PROBE_CHECKS]
        if checks or (self.probe_checks and self.probe is None):
            raise ValueError(f"framework declaration {self.name!r}: probe_checks must be among {PROBE_CHECKS} "
                             f"(got {checks}) and need a probe")
