"""``dlbench bisect``: the planted tests (a local index of fake releases, see tests/fakerelease.py), the
search on its own, the stored state and ``--list``, and bad input.

The planted tests go through the real path: pip lists the releases from a ``--find-links`` directory
(pip's own configuration, as a user's mirror would be), each release's environment is built by
``dlbench.envs.create`` with pip, and each step is a stored run judged by ``compare``'s test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dlbench import envs
from dlbench.cli.main import main
from dlbench.engines import bisect
from dlbench.engines.bisect import Step, next_candidate, pool
from dlbench.envs import versions
from dlbench.frameworks import FRAMEWORKS, load_plugins
from tests import fakerelease
from tests.conftest import over_budget

RELEASES = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"]
FAST = ["--warmup", "1", "--min-iters", "3", "--min-time", "0", "--timeout", "120"]


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip pointed at a --find-links directory only; fakerel registered here and in every process."""
    links = tmp_path / "links"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("DLBENCH_PLUGINS", fakerelease.__file__)
    load_plugins()
    yield links
    FRAMEWORKS.pop("fakerel", None)


def test_the_planted_slow_release_is_found_exactly_skipping_an_uninstallable_one(local_index, tmp_db, capsys):
    """1.6 sleeps 4 ms per call (the forward itself takes microseconds); 1.4, the first midpoint,
    cannot be installed. The first bad release must be 1.6, with at most ceil(log2(n)) + 2 builds
    (failed attempts included), 1.4 said as skipped, and every step a stored run."""
    fakerelease.make_index(local_index, RELEASES, slow_from="1.6", uninstallable=("1.4",))
    code = main(["bisect", "--framework", "fakerel", "--good", "1.0", "--bad", "1.8", "--model", "dense-1",
                 "--scenario", "forward", "--repeats", "2", *FAST, "--db", str(tmp_db), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    r = out["result"]
    assert out["status"] == "found" and (r["first_bad"], r["last_good"]) == ("1.6", "1.5")
    assert r["ratio"]["ratio"] > 2 and r["ratio"]["ci_low"] > 1.05 and r["ratio"]["p"] < 0.01
    assert r["skipped"] == [{"version": "1.4", "reason": r["skipped"][0]["reason"]}]
    assert "dlbench-fakerel-missing-dependency" in r["skipped"][0]["reason"]
    attempts = len(out["built"]) + len(out["not_installable"])
    assert attempts <= math.ceil(math.log2(len(RELEASES))) + 2, out["built"]
    assert out["not_installable"] == ["1.4"] and set(out["built"]) >= {"1.0", "1.5", "1.6", "1.8"}
    assert out["used"] == out["built"] and r["environments_used"] == r["environments_built"] == len(out["built"])
    assert [envs.load(f"fakerel=={v}").framework_version for v in out["built"]] == out["built"]
    # built by this Python's pip into a venv without one, the checkout linked by a .pth (no build backend needed)
    env = Path(envs.load(versions.normal_name("fakerel==1.6")).path)
    assert not (env / "bin" / "pip").exists() and len(list(env.glob("lib/python*/site-packages/dlbench-checkout.pth"))) == 1
    # every step is a stored run of the candidate beside its bounds, and --list shows the bisection
    from dlbench.storage.store import Store

    store = Store(tmp_db, read_only=True)
    runs = {r["id"] for r in store.list_runs()}
    assert {run for st in out["steps"] for run in st["runs"]} <= runs and len(runs) >= 3
    store.close()
    assert main(["bisect", "--list", "--db", str(tmp_db)]) == 0
    listed = capsys.readouterr().out
    assert out["id"] in listed and "found" in listed and "1.6" in listed


@over_budget
def test_gate_mode_finds_the_first_release_that_fails_the_gate(local_index, tmp_db, capsys):
    """The real path of --gate (pip, environments, dlbench verify per release); over CI's time budget, so
    CI runs the search with the gate faked below, and this with DLBENCH_SLOW_TESTS=1."""
    fakerelease.make_index(local_index, ["2.0", "2.1", "2.2", "2.3", "2.4"], wrong_from="2.3")
    code = main(["bisect", "--framework", "fakerel", "--good", "2.0", "--bad", "2.4", "--model", "dense-1", "--gate",
                 "--db", str(tmp_db)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "first bad release: fakerel 2.3 fails the gate (last good: 2.2)" in out


# --- the search alone -------------------------------------------------------------------------------
def _walk(releases: list[str], first_bad: str, unjudgeable: set[str]) -> tuple[dict[str, str], int]:
    verdicts = {releases[0]: "good", releases[-1]: "bad"}
    tries = 2
    while (v := next_candidate(releases, verdicts)) is not None:
        tries += 1
        verdicts[v] = "skip" if v in unjudgeable else "bad" if releases.index(v) >= releases.index(first_bad) else "good"
    return verdicts, tries


@pytest.mark.parametrize("n", [2, 3, 5, 9, 17, 40])
def test_the_search_takes_at_most_log2_steps_and_finds_every_planted_release(n):
    releases = [f"1.{i}" for i in range(n)]
    for k in range(1, n):
        verdicts, tries = _walk(releases, releases[k], set())
        lo, hi = bisect.bounds(releases, verdicts)
        assert releases[hi] == releases[k] and hi == lo + 1
        assert tries <= math.ceil(math.log2(n)) + 2


def test_a_skipped_release_next_to_the_change_leaves_both_as_candidates():
    releases = [f"1.{i}" for i in range(9)]
    verdicts, _ = _walk(releases, "1.5", {"1.4"})
    lo, hi = bisect.bounds(releases, verdicts)
    assert (releases[lo], releases[hi]) == ("1.3", "1.5")  # 1.4 may be the first bad one: git bisect says the same


def test_pooling_keeps_every_process():
    from dlbench.report.results import CellResult

    a = CellResult(cell=None, verified="pass", samples_ms=[1.0, 1.1, 2.0], sample_repeats=[0, 0, 1],
                   repeat_medians_ms=[1.05, 2.0])
    b = CellResult(cell=None, verified="pass", samples_ms=[3.0], sample_repeats=[0], repeat_medians_ms=[3.0])
    p = pool([a, b])
    assert p.sample_repeats == [0, 0, 1, 2] and p.repeat_medians_ms == [1.05, 2.0, 3.0]


def test_a_stored_bisection_reads_back_as_it_was_saved(tmp_db):
    from dlbench.storage.store import Store

    b = bisect.Bisection("b-x", 1.0, bisect.Settings("jax", "0.4.38", "0.10.2", "fcn-r", "train_step"),
                         ["0.4.38", "0.5.0", "0.10.2"], [Step("0.4.38", "good"), Step("0.5.0", "skip", "pip: no")],
                         built=["0.4.38"], status="interrupted")
    store = Store(tmp_db)
    store.save_bisection(b.id, b.started_at, b.status, b.to_dict())
    store.close()
    assert bisect.listing(tmp_db)[0] == b


# --- bad input ----------------------------------------------------------------------------------------
BAD = [
    (["--good", "0.4.38", "--bad", "0.10.2", "--model", "fcn-r", "--scenario", "train_step"], "--framework is required"),
    (["--framework", "jax==0.4.38", "--good", "0.4.38", "--bad", "0.10.2", "--model", "fcn-r", "--scenario", "forward"],
     "name the framework alone"),
    (["--framework", "mxnet", "--good", "1.8", "--bad", "1.9.1", "--model", "lenet", "--scenario", "forward"],
     "cannot be pinned"),
    (["--framework", "jax", "--good", "abc", "--bad", "0.10.2", "--model", "lenet", "--scenario", "forward"],
     "not a release number"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "nosuch", "--scenario", "forward"],
     "unknown model"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet"], "--scenario is required"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet", "--scenario", "compile"],
     "per-batch scenario"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet", "--gate", "--scenario",
      "forward"], "leave --scenario and --faster out"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet", "--scenario", "forward",
      "--threshold", "0"], "--threshold"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet", "--scenario", "forward",
      "--repeats", "4", "--max-repeats", "3"], "below --repeats"),
    (["--framework", "jax", "--good", "0.4.38", "--bad", "0.10.2", "--model", "lenet", "--scenario", "forward",
      "--repeats", "1"], "--repeats must be at least 2"),
    (["--resume", "b-nosuch"], "no bisection"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_db, capsys):
    from dlbench.storage.store import Store

    Store(tmp_db).close()
    assert main(["bisect", *argv, "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_ends_pip_does_not_list_are_refused(local_index, tmp_db, capsys):
    fakerelease.make_index(local_index, ["1.0", "1.1"])
    assert main(["bisect", "--framework", "fakerel", "--good", "1.0", "--bad", "1.9", "--model", "dense-1",
                 "--scenario", "forward", "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--bad 1.9: pip lists no such release of dlbench-fakerel" in err and "1.0, 1.1" in err
    assert main(["bisect", "--framework", "fakerel", "--good", "1.1", "--bad", "1.0", "--model", "dense-1",
                 "--scenario", "forward", "--db", str(tmp_db)]) == 2
    assert "must be an older release" in capsys.readouterr().err


def test_an_interrupted_bisection_resumes_where_it_stopped(tmp_db, monkeypatch, capsys):
    """The measuring faked (a release is bad from 3.5 on), the search, the stored state, the interruption
    and --resume real: the releases judged before Ctrl-C are not judged again."""
    from packaging.version import Version

    releases = [f"3.{i}" for i in range(9)]
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: releases)
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: None)
    judged, interrupted = [], []

    def step(m, version, good, bad):
        judged.append(version)
        if version == "3.6" and not interrupted:
            interrupted.append(version)
            raise KeyboardInterrupt
        slow = Version(version) >= Version("3.5")
        test = {"ratio": 1.4 if slow else 1.0, "ci_low": 1.3 if slow else 0.97, "ci_high": 1.5 if slow else 1.03,
                "p": 1e-4 if slow else 0.8, "verdict": "slower" if slow else "same", "processes": [3, 3],
                "median_ms": [1.0, 1.4 if slow else 1.0]}
        st = Step(version, "bad" if slow else "good", against=(good, bad), vs_good=test, processes=3, runs=["r"])
        m.b.steps.append(st)
        return st

    monkeypatch.setattr(bisect, "_timed_step", step)
    argv = ["bisect", "--framework", "jax", "--good", "3.0", "--bad", "3.8", "--model", "lenet", "--scenario",
            "forward", "--db", str(tmp_db)]
    assert main(argv) not in (0, 1, 2)  # interrupted
    assert "dlbench bisect --resume b-" in capsys.readouterr().err
    (stored,) = bisect.listing(tmp_db)
    assert stored.status == "interrupted" and [s.version for s in stored.steps] == ["3.0", "3.8", "3.4"]
    assert main(["bisect", "--list", "--db", str(tmp_db)]) == 0 and "interrupted" in capsys.readouterr().out
    assert main(["bisect", "--resume", stored.id, "--db", str(tmp_db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "found" and out["result"]["first_bad"] == "3.5" and out["result"]["last_good"] == "3.4"
    assert judged == ["3.8", "3.4", "3.6", "3.6", "3.5"]
    assert main(["bisect", "--resume", stored.id, "--db", str(tmp_db)]) == 1  # found: nothing to resume
    assert "nothing to resume" in capsys.readouterr().err


def _cell(version: str, medians: list[float]):
    from dlbench.report.results import CellResult
    from dlbench.storage.store import CellRecord

    record = CellRecord(0, "r", "k", f"jax=={version}", "jit", "lenet", "forward", 8, 1, "cpu", "synthetic", "ok", "",
                        1.0, [], {})
    samples = [m * f for m in medians for f in (0.99, 1.0, 1.01)]
    return CellResult(cell=record, verified="pass", samples_ms=samples,
                      sample_repeats=[i for i in range(len(medians)) for _ in range(3)], repeat_medians_ms=list(medians))


def test_an_inconclusive_step_measures_more_processes_then_says_so(tmp_db, monkeypatch, capsys):
    """A candidate halfway between its bounds with a wide process-to-process spread: neither slower than
    the last good one nor faster than the first bad one. The step adds processes (--repeats at a time,
    pooled) up to --max-repeats, then the bisection stops as inconclusive with the interval. (With 9
    processes the same spread would call it slower: more processes do decide.)"""
    releases = ["4.0", "4.1", "4.2"]
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: releases)
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: None)
    level = {"4.0": [1.0, 1.01, 0.99], "4.2": [2.0, 2.02, 1.98], "4.1": [1.0, 2.0, 1.5]}
    calls = []

    def cells(self, versions, step):
        n = min(self.s.repeats, self.s.max_repeats - step.processes) if step.processes else self.s.repeats
        calls.append((step.version, n))
        step.processes += n
        step.runs.append(f"run{len(calls)}")
        return {v: _cell(v, (level[v] * 4)[:step.processes]) for v in versions}

    monkeypatch.setattr(bisect._Measure, "cells", cells)
    code = main(["bisect", "--framework", "jax", "--good", "4.0", "--bad", "4.2", "--model", "lenet", "--scenario",
                 "forward", "--repeats", "3", "--max-repeats", "6", "--db", str(tmp_db), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["status"] == "inconclusive"
    assert calls == [("4.2", 3), ("4.1", 3), ("4.1", 3)]
    (step,) = [s for s in out["steps"] if s["version"] == "4.1"]
    assert step["verdict"] == "inconclusive" and step["processes"] == 6 and len(step["runs"]) == 2
    assert step["vs_good"]["processes"] == [6, 6] and step["vs_good"]["verdict"] == "same"
    assert out["result"]["interval"] == ["4.0", "4.2"] and out["result"]["inconclusive"] == "4.1"


def test_pips_answer_is_read_in_json_and_in_text():
    from dlbench.envs.releases import _parse

    assert _parse('{"name": "jax", "versions": ["0.10.2", "0.4.38"], "latest": "0.10.2"}') == ["0.10.2", "0.4.38"]
    assert _parse("jax (0.10.2)\nAvailable versions: 0.10.2, 0.9.0.1, 0.4.38\n") == ["0.10.2", "0.9.0.1", "0.4.38"]
    assert _parse("") == []


def test_gate_mode_judges_pass_good_and_fail_bad(tmp_db, monkeypatch, capsys):
    """--gate with the gate's verdicts faked (wrong from 5.5 on, 5.3, the first midpoint, unsupported): the
    first release that fails is named, the unsupported one skipped and said, and nothing is timed."""
    from packaging.version import Version

    releases = [f"5.{i}" for i in range(7)]
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: releases)
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: None)
    monkeypatch.setattr(bisect._Measure, "cells", lambda self, versions, step: pytest.fail("--gate timed something"))
    asked = []

    def gate(self, version):
        asked.append(version)
        if version == "5.3":
            return "skip", "unsupported: no such layer"
        return ("fail", "forward error 1e-2 > 1e-4") if Version(version) >= Version("5.5") else ("pass", "")

    monkeypatch.setattr(bisect._Measure, "gate", gate)
    assert main(["bisect", "--framework", "jax", "--good", "5.0", "--bad", "5.6", "--model", "lenet", "--gate",
                 "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "first bad release: jax 5.5 fails the gate (last good: 5.4)" in out
    assert "skipped jax 5.3: unsupported: no such layer" in out
    assert asked[:3] == ["5.0", "5.6", "5.3"] and len(asked) <= math.ceil(math.log2(len(releases))) + 2 + 1
    assert main(["bisect", "--framework", "jax", "--good", "5.0", "--bad", "5.2", "--model", "lenet", "--gate",
                 "--db", str(tmp_db)]) == 1
    assert "passes the gate" in capsys.readouterr().out
    assert main(["bisect", "--framework", "jax", "--good", "5.0", "--bad", "5.3", "--model", "lenet", "--gate",
                 "--db", str(tmp_db)]) == 1  # an end the gate cannot judge: said, not a traceback
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines: one line
    assert last.startswith("dlbench: bisect: --bad 5.3 cannot be judged by the gate on lenet: unsupported")


def test_a_dry_run_lists_the_releases_and_builds_nothing(local_index, tmp_path, tmp_db, capsys):
    fakerelease.make_index(local_index, ["1.0", "1.1", "1.2", "1.3", "1.4", "2.0"])
    assert main(["bisect", "--framework", "fakerel", "--good", "1.0", "--bad", "1.4", "--model", "dense-1",
                 "--scenario", "forward", "--dry-run", "--json", "--db", str(tmp_db)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["releases"] == ["1.0", "1.1", "1.2", "1.3", "1.4"] and plan["ready"] == []
    assert (plan["steps_after_ends"], plan["builds_at_most"]) == (2, 4)
    assert not (tmp_path / "envs").exists() and not tmp_db.exists()


def test_faster_finds_the_release_that_brought_an_improvement(tmp_db, monkeypatch, capsys):
    """--faster: the cells faked (every release from 5.3 on runs in 0.8 of the time); bad is faster.
    Without --faster the same releases are no regression, and the bisection says to bisect with it."""
    from packaging.version import Version

    releases = [f"5.{i}" for i in range(7)]
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: releases)
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: None)

    def cells(self, versions, step):
        step.processes += self.s.repeats
        step.runs.append("r")
        return {v: _cell(v, [(0.8 if Version(v) >= Version("5.3") else 1.0) * m for m in (1.0, 1.01, 0.99, 1.0)])
                for v in versions}

    monkeypatch.setattr(bisect._Measure, "cells", cells)
    argv = ["bisect", "--framework", "jax", "--good", "5.0", "--bad", "5.6", "--model", "lenet", "--scenario",
            "forward", "--repeats", "4", "--db", str(tmp_db), "--json"]
    assert main([*argv, "--faster"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "found" and out["result"]["first_bad"] == "5.3" and out["result"]["last_good"] == "5.2"
    assert out["result"]["ratio"]["ratio"] == pytest.approx(0.8, rel=0.02)
    assert out["result"]["ratio"]["verdict"] == "faster"
    assert main(argv) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "no-change" and "with --faster" in out["result"]["message"]
    assert main([*argv[:-1], "--faster", "--gate"]) == 2


def test_a_second_resume_is_refused_while_the_first_driver_lives(tmp_db, monkeypatch, capsys):
    """Two `bisect --resume ID` at once measured the same releases beside each other and both wrote
    the state. The bisection now records its driver; a live one refuses the second (exit 2, one line),
    a gone one (its process ended) lets the resume take over."""
    import subprocess
    import sys

    from dlbench.storage import lease
    from dlbench.storage.store import Store

    def stored(driver):
        b = bisect.Bisection("b-y", 1.0, bisect.Settings("jax", "0.4.38", "0.10.2", "fcn-r", "train_step"),
                             ["0.4.38", "0.5.0", "0.10.2"], [Step("0.4.38", "good")], status="running", driver=driver)
        store = Store(tmp_db)
        store.save_bisection(b.id, b.started_at, b.status, b.to_dict())
        store.close()

    stored(lease.holder())  # this very process: alive
    assert main(["bisect", "--resume", "b-y", "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err
    assert "bisection b-y is still being measured by pid" in err and len(err.strip().splitlines()) == 1
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stored({"pid": gone.pid, "host": lease.holder()["host"], "token": "", "heartbeat": 0.0})
    resumed = []
    monkeypatch.setattr(bisect, "_loop", lambda m: resumed.append(m.b.driver["pid"]) or m.b)
    bisect.resume("b-y", tmp_db)
    assert resumed == [lease.holder()["pid"]]
    assert bisect.get("b-y", tmp_db).driver["pid"] == lease.holder()["pid"]  # the claim is stored


MEASURING_REFUSED = [
    (["--min-time", "nan"], "--min-time (protocol.min_time_s)"),
    (["--warmup", "-5"], "--warmup (protocol.warmup)"),
    (["--timeout", "-1"], "--timeout (protocol.timeout_s)"),
    (["--variant", "nosuch"], "jax has no variant nosuch"),
]


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("flags, message", MEASURING_REFUSED)
def test_measuring_flags_are_refused_before_anything_is_stored_or_built(flags, message, dry_run, tmp_db,
                                                                         monkeypatch, capsys):
    """A value a step's run would refuse is refused by ``bisect`` itself, with or without --dry-run, before
    pip is asked, an environment is built or the bisection is saved (else it stays ``running`` for good)."""
    from dlbench.storage.store import Store

    Store(tmp_db).close()
    monkeypatch.setattr(bisect.releases, "between", lambda *a, **k: pytest.fail("pip asked before the refusal"))
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: pytest.fail("built before the refusal"))
    argv = ["bisect", "--framework", "jax", "--good", "3.0", "--bad", "3.8", "--model", "lenet", "--scenario",
            "forward", *flags, "--db", str(tmp_db)] + (["--dry-run"] if dry_run else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert bisect.listing(tmp_db) == []


def test_threads_beyond_the_machine_are_recorded_as_measured(tmp_db, monkeypatch, capsys):
    """``dlbench run --threads 4096`` measures, and stores, the machine's cores; a bisection says the same
    count as the runs of its steps, not the one asked for."""
    import os

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: ["3.0", "3.1"])
    assert main(["bisect", "--framework", "jax", "--good", "3.0", "--bad", "3.1", "--model", "lenet", "--scenario",
                 "forward", "--threads", "4096", "--dry-run", "--json", "--db", str(tmp_db)]) == 0
    assert f", {cores} thread(s)" in json.loads(capsys.readouterr().out)["figure"]
    started = []
    monkeypatch.setattr(bisect, "_loop", lambda m: started.append(m.b.settings.threads) or m.b)
    main(["bisect", "--framework", "jax", "--good", "3.0", "--bad", "3.1", "--model", "lenet", "--scenario",
          "forward", "--threads", "4096", "--db", str(tmp_db)])
    assert started == [cores] and bisect.listing(tmp_db)[0].settings.threads == cores


def test_a_resumed_bisection_counts_each_release_once(tmp_db, monkeypatch, capsys):
    """Interrupted while measuring its ends, then resumed: the ends' environments are needed again, but a
    bisection of two releases used two environments, and the interruption names the database to resume in."""
    monkeypatch.setattr(bisect.releases, "between", lambda framework, good, bad, pre=False: ["5.0", "5.1"])
    monkeypatch.setattr(bisect.ondemand, "ensure_envs", lambda names, say: {})
    interrupted = []

    def step(m, version, good, bad):
        if not interrupted:
            interrupted.append(version)
            raise KeyboardInterrupt
        test = {"ratio": 1.4, "ci_low": 1.3, "ci_high": 1.5, "p": 1e-4, "verdict": "slower", "processes": [3, 3],
                "median_ms": [1.0, 1.4]}
        st = Step(version, "bad", against=(good, bad), vs_good=test, processes=3, runs=["r"])
        m.b.steps.append(st)
        return st

    monkeypatch.setattr(bisect, "_timed_step", step)
    assert main(["bisect", "--framework", "jax", "--good", "5.0", "--bad", "5.1", "--model", "lenet", "--scenario",
                 "forward", "--db", str(tmp_db)]) not in (0, 1, 2)
    (stored,) = bisect.listing(tmp_db)
    assert f"dlbench bisect --resume {stored.id} --db {tmp_db}" in capsys.readouterr().err
    assert main(["bisect", "--resume", stored.id, "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "environments used: 2; built by this bisection: 2 (5.0, 5.1)" in out
    (done,) = bisect.listing(tmp_db)
    assert done.used == ["5.0", "5.1"] and done.result["environments_used"] == 2


def test_a_bisection_stored_with_settings_now_refused_is_not_resumed(tmp_db, monkeypatch, capsys):
    """Saved before its flags were checked up front (``--warmup -5``): --resume says why, in one line, and
    builds nothing."""
    from dlbench.report.bisection import Bisection, Settings
    from dlbench.storage.store import Store

    b = Bisection("b-old", 0.0, Settings("jax", "3.0", "3.1", "lenet", "forward", protocol={"warmup": -5}),
                  ["3.0", "3.1"])
    store = Store(tmp_db)
    store.save_bisection(b.id, b.started_at, b.status, b.to_dict())
    store.close()
    monkeypatch.setattr(bisect._Measure, "build", lambda self, version: pytest.fail("built before the refusal"))
    assert main(["bisect", "--resume", "b-old", "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bisection b-old cannot be resumed" in err and "--warmup" in err and "\n" not in err


def test_an_unbuilt_release_is_estimated_from_the_bytes_pip_would_install(local_index, monkeypatch):
    """Issue 45: a release with no environment is estimated from the bytes of what pip would install (its
    dry run's report; a local file's size from the disk) at this host's seconds per byte, learned from the
    builds that recorded theirs; where the sizes cannot be read, from the median build here, as before."""
    from dlbench.frameworks import framework_info, ondemand
    from dlbench.frameworks.ondemand import estimate_builds

    monkeypatch.setenv("DLBENCH_PACKAGE_SIZES", "on")
    fakerelease.make_index(local_index, ["1.0", "1.1"])
    record = envs.create(framework_info("fakerel==1.0"))
    wheel = {v: (local_index / f"dlbench_fakerel-{v}-py3-none-any.whl").stat().st_size for v in ("1.0", "1.1")}
    assert (record.wheel_bytes, record.network_bytes) == (wheel["1.0"], 0)  # found on this disk: no download
    assert envs.load("fakerel==1.0").wheel_bytes == wheel["1.0"]
    (b,) = estimate_builds(["fakerel==1.1"])
    assert (b.fetch_bytes, b.network_bytes) == (wheel["1.1"], 0)
    assert b.seconds == pytest.approx(wheel["1.1"] * record.create_seconds / record.wheel_bytes)
    unpacked = ondemand.du(Path(record.path)) / record.wheel_bytes  # the build before, on disk per packaged byte
    assert b.size_bytes == pytest.approx(wheel["1.1"] * unpacked)
    assert "per GiB of packages, the median of 1 of fakerel's builds here" in b.basis
    assert b.text().startswith("fakerel==1.1: 0 MiB of packages (0 MiB over the network), ")
    monkeypatch.setenv("DLBENCH_PACKAGE_SIZES", "off")
    (b,) = estimate_builds(["fakerel==1.1"])
    assert b.seconds == record.create_seconds and b.fetch_bytes is None and "sizes are unknown" in b.basis
