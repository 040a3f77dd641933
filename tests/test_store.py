import sqlite3

import pytest

from dlbench import frameworks
from dlbench.core.errors import UsageError
from dlbench.measure import peak
from dlbench.storage.store import SCHEMA_VERSION, Sample, Store


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

    from dlbench.planning.plan import Cell
    from dlbench.running import runner

    jobs = []

    def fake_job(job, timeout, threads):
        jobs.append(threads)
        return SimpleNamespace(status="ok", result={"gflops": {"numpy": 10.0 * threads}})

    cells = [Cell("torch", "eager", "lenet", "forward", 8, t, "cpu") for t in (1, 2)]
    s = Store(tmp_db)
    monkeypatch.setenv("DLBENCH_PEAK_CACHE", str(tmp_path / "peaks.json"))
    monkeypatch.setattr(frameworks, "peak_engines", lambda: {"numpy": peak.NUMPY})  # one process per thread count
    for _ in range(2):
        run = s.create_run("x", {})
        runner._peaks(s, run, cells, lambda *a, **k: None, fake_job)
        assert s.peaks(run) == {1: {"numpy": 10.0}, 2: {"numpy": 20.0}}
    assert jobs == [1, 2]  # the second run reused both
    monkeypatch.delenv("DLBENCH_PEAK_CACHE")
    runner._peaks(s, s.create_run("x", {}), cells, lambda *a, **k: None, fake_job)
    assert jobs == [1, 2, 1, 2]  # without the variable every run measures its own


def _other_process_opens_and_closes(db) -> None:
    """What `dlbench runs` does beside a driver: another process reads the database and closes it."""
    import subprocess
    import sys

    code = f"import sqlite3; c = sqlite3.connect({str(db)!r}); c.execute('SELECT count(*) FROM runs').fetchone(); c.close()"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("second", ["reopen", "read_only"])
def test_a_second_store_in_the_process_keeps_the_first_ones_locks(tmp_db, second):
    """A driver opened a second Store of its database (the lease heartbeat's reopen; a read-only one)
    and that Store read the file's header with open()/close(): closing any descriptor of a file drops
    every POSIX lock the process holds on it, so the next reader in another process (`dlbench runs`)
    found no one holding the database, checkpointed and deleted the -wal under the driver, whose later
    writes went into the deleted file and were lost with the process (a study lost 13 minutes so)."""
    store = Store(tmp_db)
    store.create_run("first", {})
    other = store.reopen() if second == "reopen" else Store(tmp_db, read_only=True)
    other.close()
    _other_process_opens_and_closes(tmp_db)
    assert (tmp_db.parent / (tmp_db.name + "-wal")).exists(), "the -wal was deleted under an open connection"
    rid = store.create_run("second", {})
    reader = Store(tmp_db, read_only=True)  # a new connection, as another process would make
    assert rid in [r["id"] for r in reader.list_runs()]
    reader.close()
    store.close()
