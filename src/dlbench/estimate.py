"""How long a run will take: shown by ``dlbench run`` while it measures and by ``--dry-run`` before.

Before any cell is done the estimate comes from the protocol alone (rough): per process, a start-up
(interpreter, framework import, model build) plus ``warmup`` and ``min_iters`` steps (at least
``min_time_s``), each step guessed from the model's FLOPs at :data:`GFLOPS_PER_THREAD`; ``repeats``
processes per cell. Then each finished cell teaches it: a cell left is predicted by the mean wall
time of the finished cells of its framework, variant and scenario, else of its scenario, else by its
protocol guess scaled by how far the guesses for the finished cells were off. A cell whose framework
cannot run its scenario costs nothing (no process is started).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dlbench.frameworks import framework_info
from dlbench.models import get_model
from dlbench.plan import Cell, Suite
from dlbench.scenarios import registry

#: seconds to start one measuring process: interpreter, framework import, model build, first call
#: (rough: 2 s for torch to 10 s and more for TensorFlow or a JVM)
START_S = 4.0
#: sustained GFLOP/s of one CPU thread in a framework's kernels, to guess a step's time (rough)
GFLOPS_PER_THREAD = 20.0
#: the same for a GPU
GFLOPS_GPU = 5000.0
#: measuring the machine's matmul peak, per thread count (see runner._peaks)
PEAK_S = 5.0
#: the equivalence gate, per model, on top of its process's start-up
VERIFY_MODEL_S = 2.0
#: training samples an epoch when the data set's size is not given (convergence)
EPOCH_SAMPLES = 10_000


def runs_a_process(cell: Cell) -> bool:
    """False where the framework cannot run the cell's scenario: the runner records it as
    unsupported without starting a process."""
    return registry.of_stored(cell.scenario).unsupported(framework_info(cell.framework)) is None


def step_seconds(cell: Cell) -> float:
    """A guess at one call of the cell's closure, from the model's FLOPs (rough)."""
    factor = registry.of_stored(cell.scenario).flop_factor or 3.0
    flops = get_model(cell.model).flops_per_sample * cell.global_batch * factor
    rate = GFLOPS_GPU if cell.device != "cpu" else GFLOPS_PER_THREAD * cell.threads
    return max(flops / (rate * 1e9), 1e-4)


def prior_seconds(cell: Cell, suite: Suite, epoch_samples: int | None = None) -> float:
    """The protocol's guess at the cell's wall time, before anything is measured (each scenario
    knows how many processes and calls a cell costs)."""
    if not runs_a_process(cell):
        return 0.0
    return registry.of_stored(cell.scenario).estimate(cell, suite, step_seconds(cell), START_S,
                                                     epoch_samples or EPOCH_SAMPLES)


def setup_seconds(cells: list[Cell]) -> float:
    """The machine peak per thread count and the equivalence gate per (framework, variant, device)."""
    threads = {c.threads for c in cells if c.device == "cpu"}
    groups: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for c in cells:
        groups[(c.framework, c.variant, c.device)].add(c.model)
    return PEAK_S * len(threads) + sum(START_S + VERIFY_MODEL_S * len(m) for m in groups.values())


@dataclass
class Estimate:
    """Seconds left of a run's cells, from the protocol and then from the cells measured so far."""

    suite: Suite
    cells: list[Cell]
    epoch_samples: dict[str, int] = field(default_factory=dict)  # data set -> training samples (convergence)
    _prior: dict[Cell, float] = field(init=False, repr=False)
    _by_group: dict[tuple[str, str, str], list[float]] = field(init=False, repr=False)
    _by_scenario: dict[str, list[float]] = field(init=False, repr=False)
    _ratio: list[tuple[float, float]] = field(init=False, repr=False)  # (measured, prior) of finished cells

    def __post_init__(self) -> None:
        self._prior = {c: prior_seconds(c, self.suite, self.epoch_samples.get(c.data)) for c in self.cells}
        self._by_group, self._by_scenario, self._ratio = defaultdict(list), defaultdict(list), []

    def prior(self, cell: Cell) -> float:
        if cell not in self._prior:
            self._prior[cell] = prior_seconds(cell, self.suite, self.epoch_samples.get(cell.data))
        return self._prior[cell]

    def record(self, cell: Cell, seconds: float, status: str) -> None:
        """A finished cell's wall time. Cells that started no process, or stopped early (failed,
        unsupported inside its process), say nothing about the others."""
        if status != "ok" or not runs_a_process(cell):
            return
        self._by_group[(cell.framework, cell.variant, cell.scenario)].append(seconds)
        self._by_scenario[cell.scenario].append(seconds)
        self._ratio.append((seconds, self.prior(cell)))

    @property
    def measured(self) -> int:
        return len(self._ratio)

    def predict(self, cell: Cell) -> float:
        """Seconds the cell will take."""
        if not runs_a_process(cell):
            return 0.0
        for seen in (self._by_group.get((cell.framework, cell.variant, cell.scenario)),
                     self._by_scenario.get(cell.scenario)):
            if seen:
                return sum(seen) / len(seen)
        prior = self.prior(cell)
        if self._ratio:
            return prior * sum(m for m, _ in self._ratio) / max(sum(p for _, p in self._ratio), 1e-9)
        return prior

    def remaining(self, cells: list[Cell]) -> float:
        return sum(self.predict(c) for c in cells)


def format_duration(seconds: float) -> str:
    """``45 s``, ``4 min 30 s``, ``1 h 05 min``: the precision an estimate deserves."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, s = divmod(s, 60)
        return f"{m} min {s:02d} s" if m < 10 else f"{m} min"
    h, m = divmod(round(s / 60), 60)
    return f"{h} h {m:02d} min"


#: a guess at building an environment no earlier build on this host informs (seconds, bytes)
ENV_BUILD_S = 180.0
ENV_BUILD_BYTES = 1.5e9


@dataclass
class EnvBuild:
    """An environment a run will build before it measures (dlbench.envs.ondemand), with a guess at its
    cost: the time and size of the environments built on this host for the same framework (any
    version), else of any, else :data:`ENV_BUILD_S` and :data:`ENV_BUILD_BYTES`."""

    framework: str
    seconds: float
    bytes: float
    basis: str  # what the guess comes from


def _size(path: str) -> float:
    from pathlib import Path

    total = 0
    for p in Path(path).rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return float(total)


def env_builds(frameworks: list[str]) -> list[EnvBuild]:
    """The environments a run of ``frameworks`` will build, each with its guessed time and size."""
    from dlbench import envs
    from dlbench.frameworks import installed_version

    todo = [f for f in frameworks if framework_info(f).version is not None and installed_version(f) is None]
    if not todo:
        return []
    built = envs.list_envs()
    out = []
    for name in todo:
        base = framework_info(name).base
        same = [r for r in built if framework_info(r.framework).base == base] if built else []
        pool, basis = (same, f"{len(same)} earlier {base} environment(s) here") if same else (
            (built, f"{len(built)} earlier environment(s) of other frameworks here") if built else ([], "a default guess"))
        if pool:
            seconds = sorted(r.create_seconds for r in pool)[len(pool) // 2]
            size = sorted(_size(r.path) for r in pool)[len(pool) // 2]
        else:
            seconds, size = ENV_BUILD_S, ENV_BUILD_BYTES
        out.append(EnvBuild(name, seconds, size, basis))
    return out
