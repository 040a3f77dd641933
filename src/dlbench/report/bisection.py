"""A bisection as it is stored (:meth:`dlbench.storage.store.Store.save_bisection`): its settings, the
releases judged step by step and its outcome. Plain data, read by ``dlbench bisect`` (which runs the
search, :mod:`dlbench.bisect`) and by the history site, which shows stored bisections."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dlbench.envs import versions

__all__ = ["Bisection", "Settings", "Step"]


@dataclass
class Settings:
    framework: str  # the base name (jax)
    good: str
    bad: str
    model: str
    scenario: str | None = None  # None with gate=True
    batch: int | None = None  # None: the model's default
    threads: int = 1
    variant: str | None = None
    threshold: float = 0.05  # a fraction: 0.05 is 5%
    #: the change sought: "slower" (a regression) or "faster" (the release that brought an improvement)
    change: str = "slower"
    gate: bool = False
    repeats: int = 3  # processes per release per measurement
    max_repeats: int = 12  # processes per release before a step is called inconclusive
    protocol: dict[str, Any] = field(default_factory=dict)  # warmup, min_iters, min_time_s, timeout_s
    pre: bool = False  # pre-releases too

    def name(self, version: str) -> str:
        """The framework's name at ``version``, in the one spelling the store and the environments use
        (:func:`dlbench.envs.versions.normal_name`: ``x==1.0`` is ``x==1.0.0``)."""
        return versions.normal_name(f"{self.framework}=={version}")

    @property
    def figure(self) -> str:
        if self.gate:
            return f"{self.model}: the equivalence gate"
        return (f"{self.model} {self.scenario}" + (f" batch {self.batch}" if self.batch else "")
                + f", {self.threads} thread(s)" + (f", {self.variant}" if self.variant else ""))


@dataclass
class Step:
    """One release judged (an end, or a candidate)."""

    version: str
    verdict: str  # good, bad, skip, inconclusive
    reason: str = ""
    runs: list[str] = field(default_factory=list)
    processes: int = 0
    vs_good: dict[str, Any] | None = None  # the test against the last good release (ratio, interval, p)
    vs_bad: dict[str, Any] | None = None
    seconds: float = 0.0
    against: tuple[str | None, str | None] = (None, None)  # (last good, first bad) measured beside it


@dataclass
class Bisection:
    id: str
    started_at: float
    settings: Settings
    releases: list[str]
    steps: list[Step] = field(default_factory=list)
    built: list[str] = field(default_factory=list)  # environments built by this bisection
    used: list[str] = field(default_factory=list)  # releases whose environment it needed (built now or before)
    not_installable: list[str] = field(default_factory=list)
    status: str = "running"  # running, found, inconclusive, no-change, ambiguous, interrupted
    result: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: the process driving it (dlbench.storage.lease.holder): a second ``--resume`` is refused while it lives
    driver: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bisection:
        steps = [Step(**{**s, "against": tuple(s.get("against") or (None, None))}) for s in data["steps"]]
        return cls(**{**data, "settings": Settings(**data["settings"]), "steps": steps})

    def verdicts(self) -> dict[str, str]:
        return {s.version: s.verdict for s in self.steps}

    @property
    def skipped(self) -> list[Step]:
        return [s for s in self.steps if s.verdict == "skip"]
