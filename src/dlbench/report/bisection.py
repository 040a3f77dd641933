"""A bisection as it is stored (:meth:`dlbench.storage.store.Store.save_bisection`): its settings, the
releases judged step by step and its outcome. Plain data, read by ``dlbench bisect`` (which runs the
search, :mod:`dlbench.engines.bisect`) and by the history site, which shows stored bisections."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dlbench.envs import versions
from dlbench.storage.damage import Damaged, Real, check_record, fields_problem

__all__ = ["Bisection", "Settings", "Step", "read_stored"]


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


#: a test of one release against another as a step and the result keep it (dlbench.engines.bisect._test, final_ratio)
TEST: dict[str, Any] = {"ratio": Real, "ci_low": Real, "ci_high": Real, "p": Real, "verdict": str,
                        "processes": tuple[int, int], "median_ms": tuple[Real, Real]}
#: a bisection's result (dlbench.engines.bisect): what the listing, the summary and the site read
RESULT: dict[str, Any] = {"first_bad": str, "last_good": str, "candidates": list[str], "message": str,
                          "skipped": list[dict[str, str]], "environments_built": int, "not_installable": list[str]}


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
    def from_stored(cls, data: dict[str, Any]) -> Bisection:
        """A stored bisection's record read back; :class:`Damaged` naming the first field that is not what
        :meth:`to_dict` writes (a record edited by hand or by another program must not crash a reader)."""
        check_record(cls, data, "its record")
        tests = [(f"its record.steps[{i}].{k}", s.get(k)) for i, s in enumerate(data.get("steps", []))
                 for k in ("vs_good", "vs_bad")] + [("its record.result.ratio", data.get("result", {}).get("ratio"))]
        for where, test in tests:
            if test is not None and (found := fields_problem(test, TEST, where)):
                raise Damaged(found)
        if found := fields_problem(data.get("result", {}), RESULT, "its record.result"):
            raise Damaged(found)
        if data.get("status") == "found" and not {"first_bad", "last_good"} <= set(data["result"]):
            raise Damaged("its record says found but names no first bad and last good release")
        if not 0 <= data["started_at"] < 1e11:
            raise Damaged(f"its record.started_at is {data['started_at']!r}, not a time")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bisection:
        steps = [Step(**{**s, "against": tuple(s.get("against") or (None, None))}) for s in data["steps"]]
        return cls(**{**data, "settings": Settings(**data["settings"]), "steps": steps})

    def verdicts(self) -> dict[str, str]:
        return {s.version: s.verdict for s in self.steps}

    @property
    def skipped(self) -> list[Step]:
        return [s for s in self.steps if s.verdict == "skip"]


def read_stored(rows: list[tuple[str, dict[str, Any] | str]]) -> tuple[list[Bisection], dict[str, str]]:
    """:meth:`dlbench.storage.store.Store.bisections`' rows read back: the bisections, and the damaged ones
    (id -> what is wrong), which every reader sets aside (never resumed, left out of the site, named by
    ``dlbench bisect --list`` and ``dlbench check``)."""
    found, damaged = [], {}
    for bisection_id, data in rows:
        try:
            if isinstance(data, str):
                raise Damaged(data)
            found.append(Bisection.from_stored(data))
        except Damaged as exc:
            damaged[bisection_id] = str(exc)
    return found, damaged
