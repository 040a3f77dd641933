"""One damaged row no longer breaks every reader of a database (issue #31, defect 7; issue #41, item 4): a
sample stored as text, zero, infinite or negative, text that is not JSON where JSON is kept, a precision this
dlbench does not know, a cell's cost, variance split or reuse record of the wrong shape, environment fields of
the wrong type, a bisection record that does not read back, a lease whose pid is text, a gate verdict whose
column and record disagree. The damaged cell, figure or run-level field is named on stderr and set aside;
every other cell and run reads as before; ``dlbench check`` lists the damage in every table; no reader writes
a byte."""

import hashlib
import json
import platform
import sqlite3

import pytest

from dlbench.cli.main import main
from tests.synthetic_runs import compare_pair

FIRST_CELL = "fakefw/ok/lenet/forward/b4/t1/cpu"
MEASURE = "(SELECT min(rowid) FROM samples WHERE phase='measure' AND cell_id=1)"
#: damage -> (SQL that plants it in run A, words that name it)
DAMAGE = {
    "sample text NaN": (f"UPDATE samples SET value_ns='NaN' WHERE rowid={MEASURE}", "'NaN'"),
    "sample zero": (f"UPDATE samples SET value_ns=0 WHERE rowid={MEASURE}", "above zero"),
    "sample 9e999": (f"UPDATE samples SET value_ns=9e999 WHERE rowid={MEASURE}", "inf"),
    "sample negative": ("UPDATE samples SET value_ns=-5e6 WHERE phase='measure' AND cell_id=1", "-5 ms"),
    "metrics not JSON": ("UPDATE cells SET metrics='{bad' WHERE id=1", "metrics is not valid JSON"),
    "warnings not JSON": ("UPDATE cells SET warnings='[bad' WHERE id=1", "warnings is not valid JSON"),
    "metrics of the wrong type": ("UPDATE cells SET metrics='{\"peak_rss_bytes\": \"x\"}' WHERE id=1", "peak_rss_bytes"),
    "metrics a list": ("UPDATE cells SET metrics='[1]' WHERE id=1", "not a dict"),
    "batch as text": ("UPDATE cells SET batch='four' WHERE id=1", "not counts"),
    # issue #41: one cell of an unknown precision made check and site refuse the whole database
    "precision unknown": ("UPDATE cells SET precision='fp99' WHERE id=1", "precision 'fp99'"),
    "sample phase bytes": (f"UPDATE samples SET phase=X'01' WHERE rowid={MEASURE}", "phase b'"),
}
RUN_DAMAGE = {
    "suite not JSON": ("UPDATE runs SET suite_json='{bad' WHERE rowid=1", "its suite is not valid JSON"),
    "environment not JSON": ("UPDATE environments SET data='{bad' WHERE rowid=1", "its environment"),
    "verification not JSON": ("UPDATE verifications SET data='{bad' WHERE rowid=1", "gate's record"),
    "peak as text": ("UPDATE peaks SET gflops='x' WHERE rowid=1", "machine peak"),
    # issue #41: fields of the wrong type broke report and site (AttributeError: 'str' object has no attribute 'get')
    "environment fields of the wrong type": (
        """UPDATE environments SET data='{"cpu": "x", "frameworks": 5, "gpus": "y", "blas": [1]}' WHERE rowid=1""",
        "its environment.cpu is 'x'"),
    "cpu fields of the wrong type": (
        """UPDATE environments SET data=json_set(data, '$.cpu.flags', 7, '$.memory_bytes', 'lots') WHERE rowid=1""",
        "environment.cpu.flags is 7"),
    "command line not words": ("UPDATE runs SET argv='[1, 2]' WHERE rowid=1", "its command line"),
}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _damaged_db(tmp_path, sql: str):
    db = tmp_path / "r.db"
    a, b = compare_pair(db)
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    conn.close()
    return db, a, b


def readers(db, a, b, tmp_path) -> list[list[str]]:
    return [["show", a], ["show", a, "--json"], ["show", a, "--warnings"], ["show", a, "--cost"], ["export", a],
            ["export", a, "--format", "json"], ["site", str(tmp_path / "site")],
            ["compare", a, b], ["report", a, "--out", str(tmp_path / "report")], ["explain", a, "--framework", "fakefw,x",
                                                                                   "--model", "lenet"],
            ["history", "--framework", "fakefw", "--model", "lenet", "--scenario", "forward", "--batch", "4"], ["runs"]]


def _read(capsys, argv, db):
    code = main([*argv, "--db", str(db)])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2), (argv, code, err)
    return code, out, err


@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_damaged_cell_is_named_and_set_aside_and_the_rest_reads(capsys, tmp_path, name):
    sql, words = DAMAGE[name]
    db, a, b = _damaged_db(tmp_path, sql)
    before = _digest(db)
    for argv in readers(db, a, b, tmp_path):
        code, out, err = _read(capsys, argv, db)
        if argv[0] in ("show", "export", "compare", "report", "history", "site"):
            assert code == 0 or argv[0] == "compare", (argv, err)
            assert FIRST_CELL in err and words in err and "set aside" in err, (argv, err)
    code, out, _ = _read(capsys, ["export", a, "--format", "json"], db)
    keys = [c["key"] for c in json.loads(out)["cells"]]
    assert FIRST_CELL not in keys and len(keys) == 3  # the damaged cell is left out, the others are there
    code, out, err = _read(capsys, ["export", b, "--format", "json"], db)  # the other run reads as before
    assert code == 0 and FIRST_CELL in [c["key"] for c in json.loads(out)["cells"]]
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and FIRST_CELL in out and words in out
    assert _digest(db) == before


@pytest.mark.parametrize("name", list(RUN_DAMAGE))
def test_a_damaged_run_field_is_named_and_the_run_still_reads(capsys, tmp_path, name):
    sql, words = RUN_DAMAGE[name]
    db, a, b = _damaged_db(tmp_path, sql)
    before = _digest(db)
    for argv in readers(db, a, b, tmp_path):
        code, out, err = _read(capsys, argv, db)
        if argv[0] in ("show", "export", "report", "site"):
            assert code == 0 and words in err, (argv, err)
    code, out, _ = _read(capsys, ["check", "--json"], db)
    found = json.loads(out)
    assert code == 1 and found["damaged"] >= 1 and any(words in n for r in found["runs"] for n in r["damage"])
    assert _digest(db) == before


def test_a_run_whose_suite_is_damaged_is_not_resumed(capsys, tmp_path):
    db, a, _ = _damaged_db(tmp_path, "UPDATE runs SET suite_json='{bad' WHERE rowid=1")
    code = main(["run", "--resume", a, "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be resumed" in err and "suite is not valid JSON" in err


def test_check_on_a_sound_database_finds_nothing(capsys, tmp_path):
    db = tmp_path / "r.db"
    compare_pair(db)
    before = _digest(db)
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 0 and "nothing damaged" in out and _digest(db) == before


def test_checks_lines_are_not_wrapped_whatever_the_paths_length(capsys, tmp_path):
    """A script reads ``check``'s closing line: a long database path wrapped it ("nothing \\ndamaged")."""
    db = tmp_path / ("a-long-folder-name-" * 6) / "r.db"
    db.parent.mkdir()
    compare_pair(db)
    code, out, _ = _read(capsys, ["check"], db)
    last = out.splitlines()[-1]
    assert code == 0 and last.startswith("2 run(s) and tables ") and last.endswith(": nothing damaged"), out


# --- a cell's optional figures: the cell is shown without the one that is damaged -----------------------------------
FIGURE_DAMAGE = {
    "cost as text": ("json_set(metrics, '$.cost', 'x')", "its metric cost is 'x'"),
    "a cost part as text": ("json_set(metrics, '$.cost', json('{\"timed_s\": \"x\", \"processes\": 1}'))",
                            "its metric cost.timed_s is 'x'"),
    "variance as text": ("json_set(metrics, '$.variance', 'x')", "its metric variance is 'x'"),
    "variance a list": ("json_set(metrics, '$.variance', json('[1, 2]'))", "its metric variance is [1, 2]"),
    "reused as text": ("json_set(metrics, '$.reused', 'x')", "its metric reused is 'x'"),
    "reused of numbers": ("json_set(metrics, '$.reused', json('{\"gate\": 5}'))", "its metric reused.gate is 5"),
    "adaptive half-width as text": ("json_set(metrics, '$.adaptive', json('{\"half_width\": \"x\"}'))",
                                    "its metric adaptive.half_width is 'x'"),
}


@pytest.mark.parametrize("name", list(FIGURE_DAMAGE))
def test_a_damaged_figure_is_left_out_and_its_cell_still_shown(capsys, tmp_path, name):
    """Text in a cell's cost, variance or reused metrics crashed ``show --cost`` and ``report`` (issue #41)."""
    expr, words = FIGURE_DAMAGE[name]
    db, a, b = _damaged_db(tmp_path, f"UPDATE cells SET metrics={expr} WHERE id=1")
    before = _digest(db)
    for argv in (["show", a, "--cost"], ["show", a, "--cost", "--json"], ["report", a, "--out", str(tmp_path / "r")],
                 ["site", str(tmp_path / "site")], ["show", a]):
        code, out, err = _read(capsys, argv, db)
        assert code == 0 and words in err and "shown without it" in err, (argv, err)
    code, out, _ = _read(capsys, ["export", a, "--format", "json"], db)
    assert FIRST_CELL in [c["key"] for c in json.loads(out)["cells"]]  # the cell is shown, without the figure
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and FIRST_CELL in out and words in out
    assert _digest(db) == before


# --- gate verdicts: where the column and the record disagree, the stricter stands ----------------------------------
@pytest.mark.parametrize("column, record, shown", [("fail", "pass", "fail"), ("pass", "not_equivalent", "not_equivalent"),
                                                   ("unsupported", "pass", "unsupported")])
def test_a_verdict_whose_column_and_record_disagree_reads_as_the_stricter(capsys, tmp_path, column, record, shown):
    """A verification whose column says fail showed as verified because its JSON said pass (issue #41, item 1)."""
    db, a, b = _damaged_db(tmp_path, f"""UPDATE verifications SET verdict='{column}',
                           data='{{"verdict": "{record}", "reason": "the record"}}' WHERE rowid=1""")
    code, out, err = _read(capsys, ["export", a, "--format", "json"], db)
    cells = json.loads(out)["cells"]
    assert code == 0 and cells and {c["verified"] for c in cells} == {shown}
    assert "read as" in err and repr(shown) in err
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and "its verdict column says" in out


# --- bisections ------------------------------------------------------------------------------------------------------
def _bisection(store, bisection_id="b-ok"):
    from dlbench.engines import bisect

    b = bisect.Bisection(bisection_id, 1.7e9, bisect.Settings("jax", "0.4.38", "0.10.2", "fcn-r", "train_step"),
                         ["0.4.38", "0.5.0", "0.10.2"], [bisect.Step("0.5.0", "skip", "pip: no")],
                         built=["0.4.38"], status="found",
                         result={"first_bad": "0.10.2", "last_good": "0.4.38",
                                 "ratio": {"ratio": 1.377, "ci_low": 1.334, "ci_high": 1.423}})
    store.save_bisection(b.id, b.started_at, b.status, b.to_dict())
    return b


BISECTION_DAMAGE = {
    "not JSON": ("'{bad'", "not valid JSON"),
    "a JSON list": ("'[1]'", "a JSON list"),
    "settings of the wrong type": ("json_set(data, '$.settings.threads', 'x')", "settings.threads is 'x'"),
    "a step without its version": ("json_remove(data, '$.steps[0].version')", "has no version"),
    "a ratio as text": ("json_set(data, '$.result.ratio.ratio', 'x')", "result.ratio.ratio is 'x'"),
    "a result as text": ("json_set(data, '$.result', 'x')", "result is 'x'"),
    "another id": ("json_set(data, '$.id', 'b-other')", "names bisection 'b-other'"),
}


@pytest.mark.parametrize("name", list(BISECTION_DAMAGE))
def test_a_damaged_bisection_is_listed_refused_skipped_and_checked(capsys, tmp_path, name):
    """A bisection record that was not JSON was an internal error in ``bisect --list``, ``--resume`` and
    ``site``, while ``check`` said nothing was damaged (issue #41)."""
    from dlbench.storage.store import Store

    expr, words = BISECTION_DAMAGE[name]
    db = tmp_path / "r.db"
    compare_pair(db)
    store = Store(db)
    _bisection(store, "b-bad")
    good = _bisection(store, "b-ok")
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE bisections SET data={expr} WHERE id='b-bad'")
    conn.close()
    before = _digest(db)
    code, out, err = _read(capsys, ["bisect", "--list"], db)
    assert code == 0 and "b-bad: damaged" in out and words in out and good.id in out
    code, out, err = _read(capsys, ["bisect", "--list", "--json"], db)
    assert code == 0 and [b["id"] for b in json.loads(out)] == [good.id] and "b-bad" in err and words in err
    code, out, err = _read(capsys, ["bisect", "--resume", "b-bad"], db)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "b-bad is damaged" in err and words in err
    code, out, err = _read(capsys, ["site", str(tmp_path / "site")], db)
    index = (tmp_path / "site" / "index.html").read_text()
    assert code == 0 and "b-bad" in err and words in err and good.id in index and "b-bad" not in index
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and "bisection b-bad" in out and words in out
    assert _digest(db) == before


# --- leases ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pid, heartbeat", [("'abc'", "1.0"), ("-3", "1.0"), ("42", "'soon'")])
def test_a_damaged_lease_is_a_dead_drivers_and_the_run_resumes(capsys, tmp_path, fake_framework, pid, heartbeat):
    """A lease row with a non-numeric pid broke ``--resume`` (os.kill of a text) and every reader of the run's
    status (issue #41). Now it reads as no live driver (the run is stale), ``check`` names it, and a resume
    takes it over."""
    from dlbench.planning import flags
    from dlbench.storage import lease
    from dlbench.storage.store import Store

    db = tmp_path / "r.db"
    store = Store(db)
    suite = flags.build_suite(models=["lenet"], frameworks=["fakefw"], variants=["ok"], scenarios=["forward"],
                              batches=[2], threads=[1])
    run_id = store.create_run(suite.name, suite.model_dump())
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"INSERT INTO leases VALUES (?, {pid}, ?, '', {heartbeat})", (run_id, platform.node()))
    conn.close()
    before = _digest(db)
    code, out, err = _read(capsys, ["runs", "--json"], db)
    assert code == 0 and json.loads(out)[0]["status"] == "stale" and "its lease set aside" in err
    code, out, err = _read(capsys, ["run", "--resume", run_id, "--dry-run"], db)
    assert code == 0, err
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and "its lease set aside" in out
    assert _digest(db) == before
    store = Store(db)
    try:  # the resume's claim: the damaged lease is replaced by the new driver's
        assert store.claim_lease(run_id, lease.holder(), lease.live) is None
        assert store.lease(run_id)["pid"] == lease.holder()["pid"]
    finally:
        store.close()


def test_rows_that_name_no_run_are_checked(capsys, tmp_path):
    db, a, b = _damaged_db(tmp_path, "INSERT INTO leases VALUES ('no-such-run', 1, 'h', 't', 1.0)")
    code, out, _ = _read(capsys, ["check"], db)
    assert code == 1 and "leases row" in out and "'no-such-run' names no row of runs" in out
    code, out, _ = _read(capsys, ["check", "--json"], db)
    found = json.loads(out)
    assert found["damaged"] == 1 and set(found["tables"]) >= {"cells", "samples", "verifications", "environments",
                                                               "bisections", "leases"}
