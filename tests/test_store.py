import sqlite3

import pytest

from dlbench.errors import UsageError
from dlbench.store import SCHEMA_VERSION, Sample, Store


def test_roundtrip(tmp_db):
    s = Store(tmp_db)
    run = s.create_run("quick", {"models": ["lenet"]})
    cell = {"key": "k", "framework": "torch", "variant": "eager", "model": "lenet", "scenario": "forward",
            "batch": 64, "threads": 1, "device": "cpu"}
    samples = [Sample(0, i, "measure", 1e6) for i in range(3)]
    cid = s.save_cell(run, cell, "ok", "", 1.0, ["w"], {"peak_rss_bytes": 5}, samples)
    assert s.done_keys(run) == {"k"}
    (rec,) = s.cells(run)
    assert rec.id == cid and rec.warnings == ["w"] and rec.metrics == {"peak_rss_bytes": 5}
    assert len(s.samples(cid, "measure")) == 3
    assert s.list_runs()[0]["cells_ok"] == 1
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()


def test_refuses_non_sqlite_file(tmp_path):
    p = tmp_path / "x.db"
    p.write_text("hello, not a database at all")
    with pytest.raises(UsageError, match="not a dlbench database"):
        Store(p)
    assert p.read_text() == "hello, not a database at all"


def test_refuses_foreign_sqlite(tmp_path):
    p = tmp_path / "other.db"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(UsageError, match="not a dlbench database"):
        Store(p)


def test_refuses_newer_schema(tmp_db):
    Store(tmp_db).close()
    conn = sqlite3.connect(tmp_db)
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(UsageError, match="newer"):
        Store(tmp_db)


def test_missing_db_for_reading(tmp_path):
    with pytest.raises(UsageError, match="no dlbench database"):
        Store(tmp_path / "nope.db", create=False)


def test_unwritable_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError):
        Store(blocker / "sub" / "results.db")


def test_unknown_run(tmp_db):
    s = Store(tmp_db)
    with pytest.raises(UsageError, match="no run"):
        s.get_run("nope")
    with pytest.raises(UsageError, match="no runs"):
        s.latest_run_id()


def test_peak_cache_measures_once_per_thread_count_and_is_off_by_default(tmp_db, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dlbench import runner
    from dlbench.plan import Cell

    jobs = []

    def fake_job(job, timeout, threads):
        jobs.append(threads)
        return SimpleNamespace(status="ok", result={"gflops": {"numpy": 10.0 * threads}})

    cells = [Cell("torch", "eager", "lenet", "forward", 8, t, "cpu") for t in (1, 2)]
    s = Store(tmp_db)
    monkeypatch.setenv("DLBENCH_PEAK_CACHE", str(tmp_path / "peaks.json"))
    for _ in range(2):
        run = s.create_run("x", {})
        runner._peaks(s, run, cells, lambda *a, **k: None, fake_job)
        assert s.peaks(run) == {1: {"numpy": 10.0}, 2: {"numpy": 20.0}}
    assert jobs == [1, 2]  # the second run reused both
    monkeypatch.delenv("DLBENCH_PEAK_CACHE")
    runner._peaks(s, s.create_run("x", {}), cells, lambda *a, **k: None, fake_job)
    assert jobs == [1, 2, 1, 2]  # without the variable every run measures its own
