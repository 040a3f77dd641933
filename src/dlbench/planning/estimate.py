"""How long a run will take: shown by ``dlbench run`` while it measures and by ``--dry-run`` before.

Before any cell is done the estimate comes from the protocol and what this machine measured before
(:mod:`dlbench.planning.history`, read from the results database): per process, an overhead
(interpreter, framework import, model build: learned per framework, variant and scenario, else
:data:`START_S`) plus ``warmup`` and ``min_iters`` calls (at least ``min_time_s``), each call the
median one stored for the same cell key, else guessed by the scenario from the model's FLOPs at the
rate this machine's cells reached (else :data:`GFLOPS_PER_THREAD`); ``repeats`` processes per cell.
Then each finished cell teaches it: a cell left is predicted by the mean wall time of the finished
cells of its framework, variant and scenario, else of its scenario, else by its prior guess scaled
by how far the guesses for the finished cells were off. A cell whose framework cannot run its
scenario costs nothing (no process is started).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dlbench.frameworks import framework_info
from dlbench.planning.history import History
from dlbench.planning.plan import Cell, Suite
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


def step_seconds(cell: Cell, suite: Suite, history: History | None = None) -> float:
    """One stored sample of the cell (a call of its closure; a generation): as this machine measured
    it before, else the scenario's guess from the model's FLOPs at the rate this machine reached."""
    history = history or History()
    known = history.call_s(cell)
    if known is not None:
        return known
    rate = history.flops_per_s(cell) or 1e9 * (GFLOPS_GPU if cell.device != "cpu" else GFLOPS_PER_THREAD * cell.threads)
    return registry.of_stored(cell.scenario).call_seconds(cell, suite, rate)


def prior_seconds(cell: Cell, suite: Suite, epoch_samples: int | None = None, history: History | None = None) -> float:
    """The guess at the cell's wall time before it is measured (each scenario knows how many
    processes and calls a cell costs; ``history`` what they cost here)."""
    if not runs_a_process(cell):
        return 0.0
    history = history or History()
    start = history.start_s(cell)
    return registry.of_stored(cell.scenario).estimate(cell, suite, step_seconds(cell, suite, history),
                                                     START_S if start is None else start,
                                                     epoch_samples or EPOCH_SAMPLES)


def setup_seconds(cells: list[Cell], history: History | None = None,
                  verified: frozenset[tuple[str, ...]] = frozenset()) -> float:
    """The machine peak per thread count and the equivalence gate per (framework, variant, device,
    precision), as the runner verifies: one process each (its overhead as learned, else :data:`START_S`)
    and a little per model. ``verified``: the groups (:attr:`Cell.group`) whose pass this host kept
    (:mod:`dlbench.measure.reuse`), which the run does not verify again."""
    history = history or History()
    threads = {c.threads for c in cells if c.device == "cpu"}
    groups: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for c in cells:
        if c.group not in verified:
            groups[(c.framework, c.variant, c.device, c.precision)].add(c.model)
    return PEAK_S * len(threads) + sum(_or_start(history.process_s(f, v)) + VERIFY_MODEL_S * len(m)
                                       for (f, v, *_), m in groups.items())


def _or_start(seconds: float | None) -> float:
    return START_S if seconds is None else seconds


@dataclass
class Estimate:
    """Seconds left of a run's cells, from the protocol and then from the cells measured so far."""

    suite: Suite
    cells: list[Cell]
    epoch_samples: dict[str, int] = field(default_factory=dict)  # data set -> training samples (convergence)
    history: History = field(default_factory=History)  # what this machine measured before
    #: the gate groups (:attr:`Cell.group`) whose pass this host kept: no gate process for them
    verified: frozenset[tuple[str, ...]] = frozenset()
    _prior: dict[Cell, float] = field(init=False, repr=False)
    _by_group: dict[tuple[str, str, str], list[float]] = field(init=False, repr=False)
    _by_scenario: dict[str, list[float]] = field(init=False, repr=False)
    _ratio: list[tuple[float, float]] = field(init=False, repr=False)  # (measured, prior) of finished cells

    def __post_init__(self) -> None:
        self._prior = {c: prior_seconds(c, self.suite, self.epoch_samples.get(c.data), self.history)
                       for c in self.cells}
        self._by_group, self._by_scenario, self._ratio = defaultdict(list), defaultdict(list), []

    def prior(self, cell: Cell) -> float:
        if cell not in self._prior:
            self._prior[cell] = prior_seconds(cell, self.suite, self.epoch_samples.get(cell.data), self.history)
        return self._prior[cell]

    def setup(self) -> float:
        """Seconds before the first cell: the machine peak and the gates the run will run."""
        return setup_seconds(self.cells, self.history, self.verified)

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
