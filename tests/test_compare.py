"""`dlbench compare`: the statistics on runs with known samples, and one real run against itself."""

import html
import json
from pathlib import Path

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.frameworks import FRAMEWORKS
from dlbench.report.compare import compare_runs, mann_whitney_p
from dlbench.storage.store import Store
from tests.conftest import requires
from tests.synthetic_runs import cell, compare_pair, finish, metrics, new_run, timed_samples, verify_pass

SLOW = ("fakefw/ok/lenet/forward/b8/t1/cpu", "fakefw/ok/lenet/train_step/b4/t1/cpu")
FAKE = str(Path(__file__).with_name("fakefw.py"))


def results(db, run_id):
    return api.results(run_id, db)


def test_same_samples_nothing_significant(tmp_db):
    a, b = compare_pair(tmp_db, same_samples=True)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert len(cmp.matched) == 4 and not cmp.only_a and not cmp.only_b
    for m in cmp.matched:
        assert m.ratio == 1.0 and m.p_value > 0.9 and m.verdict == "same"
        assert m.ci_low <= 1.0 <= m.ci_high


def test_independent_noise_nothing_significant(tmp_db):
    """Same distributions, independent draws (1% noise): never a significant change, by construction:
    the ratio cannot leave 1 ± 5% with 1% noise, whatever the p-value says."""
    a, b = compare_pair(tmp_db, noise=0.01)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert [m.verdict for m in cmp.matched] == ["same"] * 4
    assert all(abs(m.ratio - 1) < 0.02 for m in cmp.matched)


def test_planted_slowdown_flags_exactly_those_cells(tmp_db, capsys):
    """The `slow` variant of fakefw sleeps 30% extra per call; here the same slowdown is planted in
    the samples of two cells, so the statistics are tested on a known answer."""
    a, b = compare_pair(tmp_db, slow_keys=SLOW, factor=1.3)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert sorted(m.key for m in cmp.slower) == sorted(SLOW)
    assert not cmp.faster
    for m in cmp.slower:
        assert 1.27 < m.ratio < 1.33 and m.ci_low > 1.05 and m.p_value < 1e-6
    # the other direction is a speed-up of the same cells
    back = compare_runs(results(tmp_db, b), results(tmp_db, a))
    assert sorted(m.key for m in back.faster) == sorted(SLOW) and not back.slower

    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "10"]) == 1
    out = capsys.readouterr().out
    assert "--fail-above 10: 2 failure(s)" in out and SLOW[0] in out
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "50"]) == 0  # +30% is below 50%
    assert main(["compare", a, b, "--db", str(tmp_db)]) == 0  # no gate, no failure
    assert main(["compare", b, a, "--db", str(tmp_db), "--fail-above", "10"]) == 0  # faster is fine
    capsys.readouterr()
    assert main(["compare", a, b, "--db", str(tmp_db), "--json", "--fail-above", "10"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert sorted(data["slower"]) == sorted(SLOW) and len(data["failures"]) == 2
    assert {m["key"]: m["verdict"] for m in data["matched"]}[SLOW[0]] == "slower"


def test_small_shift_is_not_significant_even_with_tiny_p(tmp_db):
    """3% slower with almost no noise: the test is sure (p tiny) but the change is inside ± 5%."""
    a, b = compare_pair(tmp_db, slow_keys=SLOW, factor=1.03, noise=0.001)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    shifted = [m for m in cmp.matched if m.key in SLOW]
    assert sorted(m.key for m in shifted) == sorted(SLOW)  # both shifted cells compared (all() of none passed)
    assert all(m.p_value < 0.01 and m.verdict == "same" for m in shifted)


def test_large_but_noisy_change_is_not_significant():
    """A big median shift on three samples each: the ratio is outside 5% but p cannot be < 0.01."""
    assert mann_whitney_p([1.0, 2.0, 3.0], [2.0, 3.0, 4.5]) > 0.01
    assert mann_whitney_p([5.0] * 10, [5.0] * 10) == 1.0


def test_unmatched_failed_and_compile_cells(tmp_db, capsys):
    store = Store(tmp_db)
    ids = []
    for which in ("A", "B"):
        run_id = new_run(store, which)
        verify_pass(store, run_id, "fakefw", "ok")
        store.save_cell(run_id, cell("fakefw", "ok", "forward", 4, 1), "ok", "", 1, [], metrics(), timed_samples(5.0))
        only = cell("fakefw", "ok", "forward", 16 if which == "A" else 32, 1)
        store.save_cell(run_id, only, "ok", "", 1, [], metrics(), timed_samples(5.0))
        broke = cell("fakefw", "ok", "train_step", 4, 1)
        if which == "A":
            store.save_cell(run_id, broke, "ok", "", 1, [], metrics(), timed_samples(9.0))
        else:
            store.save_cell(run_id, broke, "failed", "<b>boom</b>", 1, [], {}, [])
        store.save_cell(run_id, cell("fakefw", "ok", "compile", 4, 1), "ok", "", 1, [], {}, [])
        finish(store, run_id)
        ids.append(run_id)
    store.close()
    a, b = ids
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert [m.key for m in cmp.matched] == ["fakefw/ok/lenet/forward/b4/t1/cpu"]
    assert cmp.only_a == ["fakefw/ok/lenet/forward/b16/t1/cpu"] and cmp.only_b == ["fakefw/ok/lenet/forward/b32/t1/cpu"]
    why = dict(cmp.not_compared)
    assert why["fakefw/ok/lenet/train_step/b4/t1/cpu"] == "A ok, B failed: <b>boom</b>"
    assert "no per-iteration samples" in why["fakefw/ok/lenet/compile/b4/t1/cpu"]
    assert cmp.broke == ["fakefw/ok/lenet/train_step/b4/t1/cpu"]
    # a cell that stopped working fails the gate: it is a slowdown without bound
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "10"]) == 1
    out = capsys.readouterr().out
    assert "only in A" in out and "b16" in out and "b32" in out


#: damage to one cell that sets it aside (tests/test_damaged_rows.py has them all)
DAMAGE = {"a sample as text": "UPDATE samples SET value_ns='NaN' WHERE cell_id={cell} AND phase='measure'",
          "an unknown precision": "UPDATE cells SET precision='fp99' WHERE id={cell}",
          "metrics not JSON": "UPDATE cells SET metrics='{{bad' WHERE id={cell}"}


@pytest.mark.parametrize("side", ["A", "B"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cell_fails_the_gate_and_is_named(tmp_db, capsys, side, damage):
    """``compare --fail-above`` passed a cell damaged in B as "only in A" (issue #41, item 5): a cell that
    stopped producing a time must fail a CI gate, said plainly, not vanish from it. Damaged in A likewise."""
    import sqlite3

    a, b = compare_pair(tmp_db, same_samples=True)
    cell = 1 if side == "A" else 5  # the first cell of run A, of run B
    with sqlite3.connect(tmp_db) as conn:
        key = conn.execute("SELECT key FROM cells WHERE id=?", (cell,)).fetchone()[0]
        conn.execute(DAMAGE[damage].format(cell=cell))
    conn.close()
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "10"]) == 1
    out = capsys.readouterr().out
    assert "1 failure(s)" in out and f"{key}: damaged in {side}" in out
    assert "1 cell(s) only in" not in out  # named as damaged, not as missing
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "10", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f for f in data["failures"] if key in f and f"damaged in {side}" in f]
    assert data["damaged"] == [{"key": key, "run": side, "why": data["damaged"][0]["why"]}] and not data["only_a"]
    assert main(["compare", a, b, "--db", str(tmp_db)]) == 0  # no gate: the damage is named, the rest compared


def test_a_damaged_version_fails_the_baseline_gate_once(tmp_db, capsys):
    """``compare --baseline``: a cell of one version set aside is that version's failure, named once."""
    import sqlite3

    store = Store(tmp_db)
    run_id = new_run(store)
    for name in ("torch==2.11.0", "torch"):
        verify_pass(store, run_id, name, "eager")
        store.save_cell(run_id, cell(name, "eager", "forward", 8, 1), "ok", "", 1.0, [], metrics(),
                        timed_samples(5.0, seed=1))
    finish(store, run_id)
    store.close()
    with sqlite3.connect(tmp_db) as conn:
        conn.execute("UPDATE cells SET precision='fp99' WHERE framework='torch'")
    conn.close()
    assert main(["compare", run_id, "--baseline", "torch==2.11.0", "--fail-above", "5", "--db", str(tmp_db),
                 "--json"]) == 1
    failures = json.loads(capsys.readouterr().out)["failures"]
    assert failures == ["torch/eager/lenet/forward/b8/t1/cpu: damaged in B, no time to compare "
                        "(its precision 'fp99' is not one this dlbench knows)"]


def test_a_cell_ok_in_a_without_a_time_in_b_fails_the_gate(tmp_db, capsys):
    """A cell stored ``ok`` in B with no samples (nothing to compare) is a cell that stopped producing a time."""
    import sqlite3

    a, b = compare_pair(tmp_db, same_samples=True)
    with sqlite3.connect(tmp_db) as conn:
        conn.execute("DELETE FROM samples WHERE cell_id=5 AND phase='measure'")
    conn.close()
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "10"]) == 1
    assert "ok in A, no time in B" in capsys.readouterr().out


def test_html_form_is_escaped(tmp_db, tmp_path):
    store = Store(tmp_db)
    ids = []
    for which in ("A", "B"):
        run_id = new_run(store, which)
        store.save_cell(run_id, cell("fakefw", "<i>x</i>", "forward", 4, 1), "ok", "", 1, [], metrics(),
                        timed_samples(5.0 if which == "A" else 7.0))
        store.save_cell(run_id, cell("fakefw", "ok", "forward", 8, 1), "ok" if which == "A" else "failed",
                        "" if which == "A" else "<script>alert(1)</script>", 1, [], metrics(),
                        timed_samples(5.0) if which == "A" else [])
        finish(store, run_id)
        ids.append(run_id)
    store.close()
    page_path = tmp_path / "cmp.html"
    assert main(["compare", *ids, "--db", str(tmp_db), "--html", str(page_path)]) == 0
    page = page_path.read_text()
    assert "<script>" not in page and "<i>x</i>" not in page
    assert html.escape("<script>alert(1)</script>") in page and html.escape("fakefw/<i>x</i>/lenet") in page
    assert 'class="num slower"' in page and "Content-Security-Policy" in page


def test_bad_input(tmp_db, capsys):
    a, b = compare_pair(tmp_db, same_samples=True)
    assert main(["compare", a, "nosuchrun", "--db", str(tmp_db)]) == 2
    assert main(["compare", a, b, "--db", str(tmp_db), "--fail-above", "-1"]) == 2
    assert main(["compare", a, "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err


@requires("torch")
def test_real_run_compared_with_itself(tmp_db, monkeypatch, capsys):
    """A real tiny fakefw run against itself: every cell matched, ratio 1, nothing significant."""
    monkeypatch.setenv("DLBENCH_PLUGINS", FAKE)
    from dlbench.frameworks import load_plugins

    load_plugins()
    try:
        res = api.run(db=tmp_db, models=["lenet"], frameworks=["fakefw"], variants=["ok"], scenarios=["forward"],
                      batches=[4], threads=[1], protocol={"warmup": 1, "min_iters": 5, "min_time_s": 0.0,
                                                          "repeats": 1, "timeout_s": 120})
    finally:
        FRAMEWORKS.pop("fakefw", None)
    assert main(["compare", res.run_id, res.run_id, "--db", str(tmp_db), "--json", "--fail-above", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["matched"]) == 1 and data["matched"][0]["ratio"] == 1.0 and not data["slower"]


@pytest.mark.parametrize("factor, verdict", [(1.3, "slower"), (1 / 1.3, "faster")])
def test_verdict_direction(tmp_db, factor, verdict):
    a, b = compare_pair(tmp_db, slow_keys=SLOW[:1], factor=factor)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert {m.key: m.verdict for m in cmp.matched}[SLOW[0]] == verdict


def test_process_noise_is_not_a_change(tmp_db):
    """Regression: two runs of identical code whose processes each sit 10% apart (what fresh
    processes do on this machine). Iterations pooled as independent draws made that 'significant'
    (p ~ 1e-20 on real runs); the process-level test does not."""
    a, b = compare_pair(tmp_db, noise=0.01, repeats=3, process_noise=0.10)
    ra, rb = results(tmp_db, a), results(tmp_db, b)
    cmp = compare_runs(ra, rb)
    assert [m.verdict for m in cmp.matched] == ["same"] * 4
    assert all(m.test == "welch-log-process-medians" and (m.processes_a, m.processes_b) == (3, 3)
               for m in cmp.matched)
    # the old test on pooled iterations would have flagged at least one of these cells
    pooled = [mann_whitney_p(ca.samples_ms, cb.samples_ms) for ca, cb in zip(ra.cells, rb.cells, strict=True)
              if ca.samples_ms]
    assert min(pooled) < 1e-6
    # and the interval of each ratio is wide enough to hold 1
    assert all(m.ci_low <= 1.0 <= m.ci_high for m in cmp.matched)


def test_planted_slowdown_found_through_process_noise(tmp_db):
    """A 30% slowdown with 6 processes a side and 5% process-to-process spread is still found."""
    a, b = compare_pair(tmp_db, slow_keys=SLOW, factor=1.3, repeats=6, process_noise=0.05)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    assert sorted(m.key for m in cmp.slower) == sorted(SLOW) and not cmp.faster
    assert all(m.p_value < 0.01 and m.ci_low > 1.05 for m in cmp.slower)


def test_the_change_reads_from_the_figures_printed_beside_it(tmp_db):
    """Regression: the ratio is of the geometric means of per-process medians while the row printed the
    pooled medians (JAX 9.71 -> 9.46 ms shown as -25.4%); the row now prints what its ratio is of."""
    from dlbench.report.compare import compare_rows

    a, b = compare_pair(tmp_db, noise=0.01, repeats=3, process_noise=0.10)
    cmp = compare_runs(results(tmp_db, a), results(tmp_db, b))
    header, rows = compare_rows(cmp)
    assert header[1:3] == ["A ms", "B ms"] and "A and B are" in header
    # the pooled medians would not have read consistently with the ratio on this data
    assert any(abs(m.median_b_ms / m.median_a_ms - m.ratio) > 0.01 for m in cmp.matched)
    for m, row in zip(cmp.matched, rows, strict=True):
        assert m.ratio == pytest.approx(m.basis_b_ms / m.basis_a_ms, rel=1e-12)
        assert float(row[2]) / float(row[1]) == pytest.approx(m.ratio, rel=0.01)
        assert row[header.index("A and B are")] == "geometric mean of the process medians"
