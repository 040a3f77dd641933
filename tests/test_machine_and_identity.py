"""Refusals that another check used to mask (issue #31, "tests that would let a regression through"):
``--resume`` on another machine, for each of the four fields that make times comparable; and the
store's check that a database is dlbench's (``meta.app``), tested where no other check refuses first."""

import hashlib
import sqlite3

import pytest

from dlbench.cli.main import main
from dlbench.measure import environment
from dlbench.storage.store import Store
from tests.conftest import requires


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _changed(env: dict, field: str) -> dict:
    env = {**env, "cpu": dict(env.get("cpu") or {})}
    if field == "cpu":
        env["cpu"]["model"] = "Another CPU 9000"
    elif field == "flags":
        env["cpu"]["flags"] = sorted(set(env["cpu"].get("flags") or []) ^ {"avx512_planted"})
    elif field == "usable_cores":
        env["usable_cores"] = (env.get("usable_cores") or 1) + 7
    else:
        env["gpus"] = [*(env.get("gpus") or []), {"name": "Planted GPU 80GB"}]
    return env


@requires("torch")
@pytest.mark.parametrize("field, words", [("cpu", "Another CPU 9000"), ("flags", "avx512_planted"),
                                          ("usable_cores", "usable_cores"), ("gpus", "Planted GPU 80GB")])
def test_resume_on_another_machine_is_refused_for_each_field(capsys, tmp_path, field, words):
    db = tmp_path / "r.db"
    store = Store(db)
    run_id = store.create_run("x", {"name": "x", "models": ["lenet"], "frameworks": ["torch"],
                                    "scenarios": ["forward"], "threads": [1]})
    store.save_environment(run_id, _changed(environment.capture({"torch": "2.13.0"}), field))
    store.finish_run(run_id, "interrupted")
    store.close()
    before = _digest(db)
    code = main(["run", "--resume", run_id, "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "measured on another machine" in err and words in err, err
    assert _digest(db) == before


def test_resume_on_the_same_machine_is_not_refused_for_its_machine():
    now = environment.machine(environment.capture({}))
    assert environment.machine_differences(now, environment.this_machine()) == []


def _foreign_with_a_meta_table(path) -> None:
    """Another application's SQLite file that happens to keep a ``meta`` table of (key, value) rows with
    a schema version dlbench would accept: only the ``app`` row says it is not ours."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [("app", "someone-else"), ("schema_version", "3")])
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.close()


@pytest.mark.parametrize("argv", [["runs"], ["show"], ["check"], ["run", "--model", "lenet", "--framework", "torch",
                                                                   "--scenario", "forward", "--threads", "1"]])
def test_a_foreign_database_with_a_meta_table_is_refused_by_the_identity_check(capsys, tmp_path, argv):
    if argv[0] == "run":
        pytest.importorskip("torch")
    db = tmp_path / "other.db"
    _foreign_with_a_meta_table(db)
    before = _digest(db)
    code = main([*argv, "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().endswith("is not a dlbench database"), err
    assert _digest(db) == before and not (tmp_path / "other.db-wal").exists()
