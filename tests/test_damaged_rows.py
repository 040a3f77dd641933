"""One damaged row no longer breaks every reader of a database (issue #31, defect 7): a sample stored
as text, zero, infinite or negative, text that is not JSON where JSON is kept. The damaged cell or
run-level field is named on stderr and set aside; every other cell and run reads as before; ``dlbench
check`` lists the damage; no reader writes a byte."""

import hashlib
import json
import sqlite3

import pytest

from dlbench.cli import main
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
}
RUN_DAMAGE = {
    "suite not JSON": ("UPDATE runs SET suite_json='{bad' WHERE rowid=1", "its suite is not valid JSON"),
    "environment not JSON": ("UPDATE environments SET data='{bad' WHERE rowid=1", "its environment"),
    "verification not JSON": ("UPDATE verifications SET data='{bad' WHERE rowid=1", "gate's record"),
    "peak as text": ("UPDATE peaks SET gflops='x' WHERE rowid=1", "machine peak"),
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
    return [["show", a], ["show", a, "--json"], ["show", a, "--warnings"], ["export", a], ["export", a, "--format", "json"],
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
        if argv[0] in ("show", "export", "compare", "report") or argv[0] == "history":
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
        if argv[0] in ("show", "export", "report"):
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
