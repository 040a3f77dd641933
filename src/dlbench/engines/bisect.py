"""``dlbench bisect``: which published release of a framework made a figure slower, or broke the gate.

Between a good and a bad release (``--good 0.4.38 --bad 0.10.2``) the releases are those the user's
pip lists (:mod:`dlbench.envs.releases`). Each step measures one release in its own environment, built on
demand with its companion pins (:func:`dlbench.frameworks.ondemand.ensure_envs`), *beside* the current last
good and first bad releases, in one run: the brief's rule that timings are compared as ratios
measured together, so a machine that drifts between steps cannot move a verdict. The step's verdict
comes from the test ``dlbench compare`` uses (:func:`dlbench.report.compare.compare_cells`: Welch's t
on the log per-process medians, p < 0.01 and more than ``threshold``):

- *bad*: significantly slower than the last good release by more than the threshold;
- *good*: significantly faster than the first bad one, or its interval against the last good one
  lies below 1 + threshold (confidently no regression of that size);
- otherwise *inconclusive*: the step measures more processes (another run of the same releases,
  pooled with the step's earlier ones) up to ``max_repeats`` per release, and then the bisection
  stops as inconclusive with the interval it has.

With ``change="faster"`` (``--faster``) the directions swap: *bad* is the release that made the figure
faster, the one a user deciding to upgrade asks for (on an AVX-512 machine JAX 0.10.2 trained fcn-r
faster than 0.4.38, where an AVX2 machine had found it slower).

A release pip cannot install, or whose cells fail the gate or do not measure, is skipped and said,
as ``git bisect skip`` does; the next candidate is the unjudged release nearest the middle. With
``gate=True`` the bisection looks for the first release that fails the equivalence gate instead
(``dlbench verify`` per release; nothing is timed).

The state (settings, releases, every step with its runs and test) is saved in the results database
after each step (:meth:`dlbench.storage.store.Store.save_bisection`), and every step's run is an ordinary
stored run, so an interrupted bisection resumes (``--resume ID``) and each cell can be reported.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlbench import api, envs
from dlbench.core.errors import UsageError
from dlbench.envs import releases
from dlbench.frameworks import installed_version, ondemand
from dlbench.planning import resolve
from dlbench.report.bisection import Bisection, Settings, Step, read_stored
from dlbench.report.compare import ALPHA, CellChange, compare_cells
from dlbench.report.results import CellResult, load_run
from dlbench.storage import lease
from dlbench.storage.store import Store, new_run_id

__all__ = ["Settings", "Step", "Bisection", "BisectError", "start", "plan", "resume", "listing", "stored",
           "next_candidate", "pool", "checked"]

Progress = Callable[[str], None]


class BisectError(Exception):
    """A bisection that cannot go on (an end cannot be measured, pip lists nothing): one line, exit 1."""


# --- the search (pure) --------------------------------------------------------------------------
def bounds(releases_: list[str], verdicts: dict[str, str]) -> tuple[int, int]:
    """Indices of the last good release and the first bad one after it."""
    lo = max(i for i, v in enumerate(releases_) if verdicts.get(v) == "good")
    hi = min(i for i, v in enumerate(releases_) if verdicts.get(v) == "bad" and i > lo)
    return lo, hi


def next_candidate(releases_: list[str], verdicts: dict[str, str]) -> str | None:
    """The unjudged release nearest the middle of the interval (the older one on a tie); None when
    every release between the bounds is judged (found, or only skipped ones are left)."""
    lo, hi = bounds(releases_, verdicts)
    open_ = [i for i in range(lo + 1, hi) if releases_[i] not in verdicts]
    if not open_:
        return None
    middle = (lo + hi) / 2
    return releases_[min(open_, key=lambda i: (abs(i - middle), i))]


def steps_left(releases_: list[str], verdicts: dict[str, str]) -> int:
    lo, hi = bounds(releases_, verdicts)
    open_ = sum(1 for i in range(lo + 1, hi) if releases_[i] not in verdicts)
    return math.ceil(math.log2(open_ + 1))


def pool(cells: list[CellResult]) -> CellResult:
    """One release's cells from several runs of a step as one: every process of each (the process is
    the test's unit, so more runs are more processes)."""
    first = cells[0]
    if len(cells) == 1:
        return first
    samples, repeats, medians = [], [], []
    offset = 0
    for c in cells:
        samples += c.samples_ms
        groups = c.sample_repeats if len(c.sample_repeats) == len(c.samples_ms) else [0] * len(c.samples_ms)
        repeats += [offset + g for g in groups]
        medians += c.repeat_medians_ms
        offset += max(groups, default=0) + 1
    return replace(first, samples_ms=samples, sample_repeats=repeats, repeat_medians_ms=medians)


def _test(change: CellChange) -> dict[str, Any]:
    return {"ratio": change.ratio, "ci_low": change.ci_low, "ci_high": change.ci_high, "p": change.p_value,
            "verdict": change.verdict, "processes": [change.processes_a, change.processes_b],
            "median_ms": [change.median_a_ms, change.median_b_ms]}


def judge(good: CellResult, cand: CellResult, bad: CellResult | None, threshold: float,
          change: str = "slower") -> tuple[str, dict, dict | None]:
    """A candidate measured beside the last good (and first bad) release: good, bad or inconclusive.
    ``change`` is what *bad* means: ``slower`` (a regression) or ``faster`` (an improvement's release)."""
    vs_good = compare_cells(good, cand, ALPHA, threshold)
    vs_bad = compare_cells(bad, cand, ALPHA, threshold) if bad is not None else None
    opposite = "faster" if change == "slower" else "slower"
    # confidently no change of the threshold's size in the sought direction
    unchanged = vs_good.ci_high < 1 + threshold if change == "slower" else vs_good.ci_low > 1 - threshold
    if vs_good.verdict == change:
        verdict = "bad"
    elif (vs_bad is not None and vs_bad.verdict == opposite) or unchanged:
        verdict = "good"
    else:
        verdict = "inconclusive"
    return verdict, _test(vs_good), _test(vs_bad) if vs_bad is not None else None


# --- measuring ------------------------------------------------------------------------------------
class _Measure:
    """Builds and measures releases for one bisection, saving its state as it goes."""

    def __init__(self, b: Bisection, db: str | Path, progress: Progress):
        self.b, self.db, self.say = b, Path(db), progress
        self.s = b.settings

    def save(self) -> None:
        if self.b.driver is not None:
            self.b.driver["heartbeat"] = time.time()
        store = Store(self.db)
        try:
            store.save_bisection(self.b.id, self.b.started_at, self.b.status, self.b.to_dict())
        finally:
            store.close()

    def build(self, version: str) -> str | None:
        """The release's environment (built now when missing); why not, when pip cannot install it."""
        name = self.s.name(version)
        had = envs.load(name) is not None or installed_version(name) is not None
        failed = ondemand.ensure_envs([name], self.say)
        if name in failed:
            if version not in self.b.not_installable:
                self.b.not_installable.append(version)
            return failed[name]
        if not had and version not in self.b.built:
            self.b.built.append(version)
        if version not in self.b.used:  # a release built before an interruption is used again on --resume
            self.b.used.append(version)
        return None

    def cells(self, versions_: list[str], step: Step) -> dict[str, CellResult]:
        """One more run of ``versions_`` (``repeats`` processes each); their cells pooled over the step's runs."""
        have = step.processes
        n = min(self.s.repeats, self.s.max_repeats - have) if have else self.s.repeats
        names = [self.s.name(v) for v in versions_]
        self.say(f"measuring {', '.join(versions_)} ({n} process(es) each"
                 + (f", {have} already" if have else "") + ")")
        res = api.run(models=[self.s.model], frameworks=names, scenarios=[self.s.scenario],
                      batches=[self.s.batch] if self.s.batch else None, threads=[self.s.threads],
                      variants=[self.s.variant] if self.s.variant else None,
                      protocol={**self.s.protocol, "repeats": n}, db=self.db,
                      argv=["bisect", self.b.id, step.version, str(len(step.runs))])
        step.runs.append(res.run_id)
        step.processes += n
        store = Store(self.db, read_only=True)
        try:
            by_run = [load_run(store, r) for r in step.runs]
        finally:
            store.close()
        out = {}
        for v, name in zip(versions_, names, strict=True):
            mine = [c for r in by_run for c in r.cells if c.cell.framework == name and c.cell.scenario == self.s.scenario]
            if not mine:
                raise _Unmeasured(v, f"the run stored no {self.s.scenario} cell of {name}")
            bad = next((c for c in mine if not (c.ok and c.samples_ms)), None)
            if bad is not None:
                raise _Unmeasured(v, ("fails the gate: " if bad.cell.status == "not_equivalent" else
                                      f"{bad.cell.status}: ") + (bad.cell.reason or "no reason recorded")[:300])
            out[v] = pool(mine)
        return out

    def gate(self, version: str) -> tuple[str, str]:
        """``pass``/``fail``/``skip`` of the release on the model's gate, with the reason."""
        name = self.s.name(version)
        results = api.verify(models=[self.s.model], frameworks=[name], threads=self.s.threads,
                             variants=[self.s.variant] if self.s.variant else None)
        if all(r.verdict == "pass" for r in results):
            return "pass", ""
        failed = [r for r in results if r.verdict not in ("pass", "unsupported")]
        if failed:
            return "fail", (failed[0].reason or f"{failed[0].verdict}")[:300]
        return "skip", (results[0].reason or "unsupported")[:300]


class _Unmeasured(Exception):
    def __init__(self, version: str, why: str):
        super().__init__(why)
        self.version, self.why = version, why


def _fmt(t: dict[str, Any] | None) -> str:
    if not t:
        return ""
    return f"{t['ratio']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}] (p={t['p']:.2g})"


def _timed_step(m: _Measure, version: str, good: str, bad: str | None) -> Step:
    """Measure ``version`` beside ``good`` (and ``bad``) until its verdict is conclusive or the limit."""
    s, b = m.s, m.b
    step = Step(version, "inconclusive", against=(good, bad))
    started = time.perf_counter()
    while True:
        order = [good, version] + ([bad] if bad else [])
        try:
            cells = m.cells(order, step)
        except _Unmeasured as exc:
            if exc.version == version:
                step.verdict, step.reason = "skip", exc.why
                break
            if bad is None:  # the ends' step: the good end itself
                raise BisectError(f"--good {exc.version} cannot be measured: {exc.why}") from None
            raise BisectError(f"{s.framework} {exc.version}, measured before, now {exc.why}") from None
        if bad is None:  # the ends: the bad end against the good one
            verdict, step.vs_good, step.vs_bad = judge(cells[good], cells[version], None, s.threshold, s.change)
            if verdict == "good" or step.vs_good["verdict"] not in (s.change, "same"):
                step.verdict, step.reason = "good", f"not {s.change} beyond the threshold between the ends"
                break
        else:
            verdict, step.vs_good, step.vs_bad = judge(cells[good], cells[version], cells[bad], s.threshold, s.change)
        if verdict != "inconclusive":
            step.verdict = verdict
            break
        if step.processes >= s.max_repeats:
            step.reason = f"still inconclusive after {step.processes} processes per release"
            break
        m.say(f"{s.framework} {version}: inconclusive against {good} ({_fmt(step.vs_good)}); more processes")
    step.seconds = time.perf_counter() - started
    b.steps.append(step)
    return step


def _gate_step(m: _Measure, version: str) -> Step:
    started = time.perf_counter()
    verdict, why = m.gate(version)
    step = Step(version, {"pass": "good", "fail": "bad", "skip": "skip"}[verdict], why,
                seconds=time.perf_counter() - started)
    m.b.steps.append(step)
    return step


def _ends(m: _Measure) -> bool:
    """Judge the ends; False when the bisection is over already (no change between them)."""
    s, b = m.s, m.b
    judged = b.verdicts()
    for end in (s.good, s.bad):
        if end in judged:
            continue
        why = m.build(end)
        if why is not None:
            raise BisectError(f"{'--good' if end == s.good else '--bad'} {end} cannot be measured: {why}")
    if s.gate:
        if s.good not in judged:
            if _gate_step(m, s.good).verdict != "good":
                raise BisectError(f"--good {s.good} does not pass the gate on {s.model}: {b.steps[-1].reason}")
            m.save()
        if s.bad not in judged:
            step = _gate_step(m, s.bad)
            m.save()
            if step.verdict == "skip":
                raise BisectError(f"--bad {s.bad} cannot be judged by the gate on {s.model}: {step.reason}")
            if step.verdict == "good":
                b.status, b.result = "no-change", {"message": f"{s.framework} {s.bad} passes the gate on {s.model} "
                                                              "too: nothing to bisect"}
                return False
        return True
    if s.good in judged and s.bad in judged:
        return True
    if s.good not in judged:
        b.steps.append(Step(s.good, "good", "the good end"))
    step = _timed_step(m, s.bad, s.good, None)
    if step.verdict == "skip":
        raise BisectError(f"--bad {s.bad} cannot be measured: {step.reason}")
    m.save()
    if step.verdict == "good":
        b.status = "no-change"
        opposite = step.vs_good["verdict"] not in (s.change, "same")
        b.result = {"message": f"{s.framework} {s.bad} is not {s.change} than {s.good} by more than "
                               f"{s.threshold:.0%}: {_fmt(step.vs_good)}; nothing to bisect"
                               + (f" (it is {step.vs_good['verdict']}: bisect "
                                  f"{'with --faster' if s.change == 'slower' else 'without --faster'} for the release"
                                  " that made it so)" if opposite else ""),
                    "vs_good": step.vs_good}
        return False
    if step.verdict == "inconclusive":
        b.status = "inconclusive"
        b.result = {"message": f"{s.framework} {s.bad} against {s.good}: {_fmt(step.vs_good)}, inconclusive after "
                               f"{step.processes} processes per release; raise --max-repeats",
                    "interval": [s.good, s.bad]}
        return False
    return True


def _estimate(m: _Measure) -> str:
    b = m.b
    left = steps_left(b.releases, b.verdicts())
    timed = [s.seconds for s in b.steps if s.seconds]
    per = sum(timed) / len(timed) if timed else None
    return f"about {left} more step(s)" + (f", ~{left * per / 60:.1f} min" if per else "")


def final_ratio(steps: list[Step], last_good: str, first_bad: str) -> dict[str, Any] | None:
    """The first bad release against the last good one, from the last step that measured both in one run
    (the final bounds always come out of one step: its candidate and the bounds it was measured beside)."""
    for st in reversed(steps):
        good, bad = st.against
        if st.version == first_bad and good == last_good and st.vs_good:
            return st.vs_good
        if st.version == last_good and bad == first_bad and st.vs_bad:
            t = st.vs_bad  # candidate / first bad, turned into first bad / candidate
            return {**t, "ratio": 1 / t["ratio"], "ci_low": 1 / t["ci_high"], "ci_high": 1 / t["ci_low"],
                    "verdict": {"slower": "faster", "faster": "slower"}.get(t["verdict"], t["verdict"]),
                    "median_ms": t["median_ms"][::-1], "processes": t["processes"][::-1]}
    return None


def _finish(m: _Measure) -> None:
    s, b = m.s, m.b
    lo, hi = bounds(b.releases, b.verdicts())
    last_good, first_bad = b.releases[lo], b.releases[hi]
    between = b.releases[lo + 1:hi]  # every one skipped: the first bad may be any of them
    b.status = "ambiguous" if between else "found"
    b.result = {"first_bad": first_bad, "last_good": last_good,
                "ratio": None if s.gate else final_ratio(b.steps, last_good, first_bad),
                "candidates": [*between, first_bad],
                "skipped": [{"version": st.version, "reason": st.reason} for st in b.skipped],
                "environments_built": len(set(b.built)), "environments_used": len(set(b.used)),
                "not_installable": list(b.not_installable),
                "steps": len(b.steps)}


def _loop(m: _Measure) -> Bisection:
    b, s = m.b, m.s
    started = time.perf_counter() - b.seconds
    try:
        if _ends(m):
            while True:
                verdicts = b.verdicts()
                version = next_candidate(b.releases, verdicts)
                if version is None:
                    _finish(m)
                    break
                lo, hi = bounds(b.releases, verdicts)
                m.say(f"step {len(b.steps) + 1}: {s.framework} {version} (between {b.releases[lo]} good and "
                      f"{b.releases[hi]} bad; {_estimate(m)})")
                why = m.build(version)
                if why is not None:
                    b.steps.append(Step(version, "skip", why))
                elif s.gate:
                    _gate_step(m, version)
                else:
                    _timed_step(m, version, b.releases[lo], b.releases[hi])
                step = b.steps[-1]
                m.say(f"  {s.framework} {version}: {step.verdict}"
                      + (f" ({_fmt(step.vs_good)} against {step.against[0]})" if step.vs_good else "")
                      + (f": {step.reason}" if step.reason else ""))
                b.seconds = time.perf_counter() - started
                if step.verdict == "inconclusive":
                    b.status = "inconclusive"
                    b.result = {"message": f"{s.framework} {version} is inconclusive ({step.reason}); the first bad "
                                           f"release lies in ({b.releases[lo]}, {b.releases[hi]}]",
                                "interval": [b.releases[lo], b.releases[hi]], "inconclusive": version,
                                "vs_good": step.vs_good, "vs_bad": step.vs_bad}
                    break
                m.save()
    except KeyboardInterrupt:
        b.status, b.seconds = "interrupted", time.perf_counter() - started
        m.save()
        m.say(f"bisection {b.id} interrupted after {len(b.steps)} judged release(s); go on with: "
              f"dlbench bisect --resume {b.id} --db {shlex.quote(str(m.db))}")
        raise
    b.seconds = time.perf_counter() - started
    b.result.setdefault("environments_built", len(set(b.built)))
    b.result.setdefault("not_installable", list(b.not_installable))
    m.save()
    return b


def checked(settings: Settings) -> Settings:
    """The settings as every step's run will measure them, checked by the rules ``dlbench run`` applies
    (:mod:`dlbench.planning.resolve`: the protocol, the model, the batch, the variant, the thread count)
    before anything is stored or built: a value a step's run would refuse would otherwise leave a
    bisection saved as running that no ``--resume`` can finish. The thread count is the one measured
    (a count beyond the machine's cores is measured, and stored by a run, at its cores)."""
    resolve.check_settings("protocol", {**settings.protocol, "repeats": settings.repeats})
    resolve.check_settings("protocol", {"repeats": settings.max_repeats})
    resolve.models([settings.model])
    if settings.batch is not None:
        resolve.batches([settings.batch])
    if settings.variant is not None:
        resolve.variants(settings.framework, [settings.variant])
    return replace(settings, threads=resolve.thread_count(settings.threads))


def start(settings: Settings, db: str | Path, progress: Progress = lambda s: None) -> Bisection:
    """Check the settings, list the releases, then bisect; the state is in ``db`` from the first step on."""
    settings = checked(settings)
    found = releases.between(settings.framework, settings.good, settings.bad, pre=settings.pre)
    b = Bisection("b-" + new_run_id(), time.time(), settings, found, driver=lease.holder())
    progress(f"bisection {b.id}: {len(found)} {settings.framework} releases from {settings.good} to {settings.bad} "
             f"({', '.join(found)}); {settings.figure}; about {2 + math.ceil(math.log2(max(len(found) - 1, 1)))} "
             "builds at most without skips")
    m = _Measure(b, db, progress)
    m.save()
    return _loop(m)


def plan(settings: Settings) -> dict[str, Any]:
    """What :func:`start` would do, without building or measuring: the releases pip lists between the ends,
    which of them already have an environment, and how many steps and builds to expect; the settings
    are checked as :func:`start` checks them."""
    settings = checked(settings)
    found = releases.between(settings.framework, settings.good, settings.bad, pre=settings.pre)
    ready = [v for v in found if envs.load(settings.name(v)) is not None
             or installed_version(settings.name(v)) is not None]
    steps = math.ceil(math.log2(max(len(found) - 1, 1))) if len(found) > 2 else 0
    return {"releases": found, "ready": ready, "steps_after_ends": steps, "builds_at_most": 2 + steps,
            "figure": settings.figure}


def resume(bisection_id: str, db: str | Path, progress: Progress = lambda s: None) -> Bisection:
    """Go on with an interrupted bisection where its last saved step left it."""
    b = get(bisection_id, db)
    if b.status not in ("running", "interrupted"):
        raise BisectError(f"bisection {bisection_id} is {b.status}; nothing to resume")
    try:
        checked(b.settings)
    except UsageError as exc:  # stored before its settings were checked up front: no step's run can measure them
        raise UsageError(f"bisection {bisection_id} cannot be resumed: its stored settings are refused ({exc}); "
                         "start a new one") from None
    me = lease.holder()
    store = Store(db)
    try:  # one driver at a time: a second resume would measure the same releases beside the first
        held = store.claim_bisection(b.id, me, lease.live)
    finally:
        store.close()
    if held is not None:
        raise UsageError(lease.refusal(b.id, held, "bisection"))
    progress(f"bisection {b.id}: resuming after {len(b.steps)} judged release(s)")
    b.status, b.driver = "running", me
    return _loop(_Measure(b, db, progress))


def stored(db: str | Path) -> tuple[list[Bisection], dict[str, str]]:
    """Every stored bisection that reads back, and those that do not: id -> what is wrong (set aside, never
    resumed; ``dlbench check`` lists them too)."""
    store = Store(db, create=False, read_only=True)
    try:
        return read_stored(store.bisections())
    finally:
        store.close()


def listing(db: str | Path) -> list[Bisection]:
    return stored(db)[0]


def get(bisection_id: str, db: str | Path) -> Bisection:
    found, damaged = stored(db)
    for b in found:
        if b.id == bisection_id:
            return b
    if bisection_id in damaged:
        raise UsageError(f"bisection {bisection_id} is damaged and cannot be read: {damaged[bisection_id]} "
                         "(dlbench check lists it)")
    raise UsageError(f"no bisection {bisection_id!r} in {db} (dlbench bisect --list)")
