"""Bad input and files that are not ours (issue 15): every case exits 2 with one line on stderr, and
neither the results database nor another application's file changes. Runs are written straight into
a store (tests/synthetic_runs.py): nothing here measures anything."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.frameworks import FRAMEWORKS, FrameworkInfo
from dlbench.gate.verify import VerifyResult
from dlbench.report.markdown import md
from dlbench.running import runner
from dlbench.storage.store import Store, check_output, explain
from tests.synthetic_runs import cell, finish, metrics, new_run, report_run, timed_samples, verify_pass

SRC = str(Path(__file__).resolve().parents[1] / "src")


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: "), err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


@pytest.fixture
def stored(tmp_path) -> tuple[Path, str]:
    db = tmp_path / "results.db"
    return db, report_run(db)


# --- 1. no output file of any command is the database ------------------------------------------------
def _same(tmp: Path, db: Path, run: str) -> list[str]:
    return ["export", run, "--out", str(db), "--db", str(db)]


def _relative(tmp: Path, db: Path, run: str) -> list[str]:
    (tmp / "sub").mkdir()  # the test runs in tmp
    return ["export", run, "--out", "sub/../results.db", "--db", "./results.db"]


def _symlink(tmp: Path, db: Path, run: str) -> list[str]:
    (tmp / "out.csv").symlink_to(db)
    return ["export", run, "--out", str(tmp / "out.csv"), "--db", str(db)]


def _hardlink(tmp: Path, db: Path, run: str) -> list[str]:
    os.link(db, tmp / "out.csv")
    return ["export", run, "--format", "json", "--out", str(tmp / "out.csv"), "--db", str(db)]


def _wal(tmp: Path, db: Path, run: str) -> list[str]:
    return ["export", run, "--out", f"{db}-wal", "--db", str(db)]


def _shm(tmp: Path, db: Path, run: str) -> list[str]:
    return ["export", run, "--out", f"{db}-shm", "--db", str(db)]


def _compare_html(tmp: Path, db: Path, run: str) -> list[str]:
    return ["compare", run, run, "--html", str(db), "--db", str(db)]


def _report_file(tmp: Path, db: Path, run: str) -> list[str]:
    (tmp / "rep").mkdir()
    (tmp / "rep" / "cells.csv").symlink_to(db)
    return ["report", run, "--out", str(tmp / "rep"), "--db", str(db)]


def _survey_file(tmp: Path, db: Path, run: str) -> list[str]:
    (tmp / "s").mkdir()
    (tmp / "s" / "survey.json").symlink_to(db)  # the survey has no --db: any SQLite file is refused
    return ["survey", "--no-live", "--framework", "caffe", "--out", str(tmp / "s")]


@pytest.mark.parametrize("argv", [_same, _relative, _symlink, _hardlink, _wal, _shm, _compare_html, _report_file,
                                  _survey_file], ids=lambda f: f.__name__.strip("_"))
def test_no_output_overwrites_the_database(stored, tmp_path, monkeypatch, capsys, argv):
    db, run = stored
    monkeypatch.chdir(tmp_path)
    before = db.read_bytes()
    args = argv(tmp_path, db, run)
    listing = sorted(p.name for p in tmp_path.iterdir())  # with what the case itself made
    assert main(args) == 2
    assert "refusing to overwrite" in one_error_line(capsys.readouterr().err)
    assert db.read_bytes() == before
    # nothing written beside it either; a command that read the database first (report) may leave SQLite's
    # own empty -wal and its -shm, as every read-only connection does
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in (f"{db.name}-wal", f"{db.name}-shm")) == listing
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def test_check_output_lets_ordinary_files_through(stored, tmp_path):
    db, _ = stored
    (tmp_path / "old.csv").write_text("a,b\n")
    assert check_output(tmp_path / "old.csv", db) == tmp_path / "old.csv"
    assert check_output(tmp_path / "new.md", db) == tmp_path / "new.md"
    assert check_output(tmp_path / "results.db.csv", db)  # a name that only starts like the database's


# --- 2. a foreign SQLite file is refused before anything is written -------------------------------------
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_foreign_sqlite_file_is_refused_untouched(tmp_path, monkeypatch, capsys, journal):
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    listing = sorted(p.name for p in tmp_path.iterdir())

    def measured(*_a, **_k):
        raise AssertionError("the run went past the store check")

    monkeypatch.setattr(runner, "plan_cells", lambda suite: (["torch"], []))  # no framework needed to get there
    monkeypatch.setattr(runner, "_run", measured)
    for argv in (["runs"], ["show"], ["export"], ["report", "--out", str(tmp_path / "rep")], ["compare", "a", "b"],
                 ["scaling-model"], ["run", "--framework", "torch", "--model", "lenet", "--scenario", "forward"],
                 ["run", "--resume", "x"]):
        assert main([*argv, "--db", str(other)]) == 2, argv
        assert "not a dlbench database" in one_error_line(capsys.readouterr().err)
    assert other.read_bytes() == before  # header bytes 18-19 too: never switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


def test_schema_version_that_is_not_a_number(tmp_path, capsys):
    db = tmp_path / "r.db"
    Store(db).close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='one' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    assert main(["runs", "--db", str(db)]) == 2
    assert "schema version 'one' is not a number" in one_error_line(capsys.readouterr().err)


# --- 3. data never becomes HTML or Markdown structure in report.md -------------------------------------
HOSTILE_MD = "<script>alert(1)</script> a|b `code` [x](javascript:alert(1)) *em*"


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_report_markdown_escapes_a_crafted_survey(stored, tmp_path, capsys):
    from dlbench.survey import collect

    db, run = stored
    data = collect(["caffe"], live=False)
    data["machine"] = data["date"] = HOSTILE_MD
    row = data["frameworks"][0]
    row["name"] = row["detail"] = row["status"] = HOSTILE_MD
    data["features"]["matrix"][HOSTILE_MD] = data["features"]["matrix"].pop(row["framework"])  # a column header
    row["framework"] = HOSTILE_MD
    (tmp_path / "survey.json").write_text(json.dumps(data))
    assert main(["report", run, "--db", str(db), "--out", str(tmp_path / "rep"),
                 "--survey", str(tmp_path / "survey.json")]) == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Survey" in text and md(HOSTILE_MD) in text
    assert "<" not in text  # no raw HTML at all: the run's <script> reason and the survey's are entities
    assert "`code`" not in text and "[x](javascript" not in text
    table: list[int] = []
    for line in text.splitlines() + [""]:  # every row of a table has as many columns as its header
        if line.startswith("|"):
            table.append(_unescaped_pipes(line))
        elif table:
            assert len(set(table)) == 1, table
            table = []


def test_a_survey_missing_fields_is_bad_input(stored, tmp_path, capsys):
    db, run = stored
    (tmp_path / "survey.json").write_text(json.dumps({"features": {}, "frameworks": [{}]}))
    assert main(["report", run, "--db", str(db), "--out", str(tmp_path / "rep"),
                 "--survey", str(tmp_path / "survey.json")]) == 2
    assert "not a readable dlbench survey" in one_error_line(capsys.readouterr().err)


# --- 4. names are printed, never read as terminal markup --------------------------------------------
HOSTILE_FW = "evil[/]fw"
HOSTILE_DEVICE = "cpu[link=https://example.com]x[/link]"


def hostile_run(db: Path) -> str:
    store = Store(db)
    try:
        run = new_run(store, "suite[/]")
        verify_pass(store, run, HOSTILE_FW, "v[bold]")
        store.save_cell(run, cell(HOSTILE_FW, "v[bold]", "forward", 4, 1, device=HOSTILE_DEVICE), "ok", "", 1.0,
                        ["noisy [/] warning"], metrics(), timed_samples(5.0))
        store.save_cell(run, cell(HOSTILE_FW, "v[bold]", "train_step", 4, 1, device=HOSTILE_DEVICE), "failed",
                        "boom [/] [link=x]", 1.0, [], metrics(), [])
        finish(store, run)
        return run
    finally:
        store.close()


def test_hostile_names_in_a_stored_run_are_printed_as_text(tmp_path, capsys):
    db = tmp_path / "r.db"
    run = hostile_run(db)
    for argv, code in ((["show", run], 1), (["show", run, "--warnings"], 0), (["runs"], 0),
                       (["compare", run, run], 0), (["report", run, "--out", str(tmp_path / "rep[/]")], 0)):
        assert main([*argv, "--db", str(db)]) == code, argv
        out, err = capsys.readouterr()
        assert "internal error" not in err, err
        if argv[0] == "show" and len(argv) == 2:
            assert HOSTILE_FW in out and HOSTILE_DEVICE in out and "boom [/] [link=x]" in out
    assert main(["runs", "--db", str(db)]) == 0
    assert "suite[/]" in capsys.readouterr().out


def test_hostile_plugin_names_are_printed_as_text(monkeypatch, capsys):
    info = FrameworkInfo(HOSTILE_FW, "nowhere", "no-such-distribution-x", "no_such_module_x", ("v[/]",),
                         "desc [link=https://example.com]x")
    monkeypatch.setitem(FRAMEWORKS, HOSTILE_FW, info)
    assert main(["list", "frameworks"]) == 0
    assert HOSTILE_FW in capsys.readouterr().out
    import dlbench.api

    monkeypatch.setattr(dlbench.api, "verify", lambda **_: [
        VerifyResult(model="lenet", framework=HOSTILE_FW, variant="v[/]", verdict="fail", reason="[/] boom")])
    assert main(["verify", "--framework", HOSTILE_FW]) == 1
    assert "[/] boom" in capsys.readouterr().out


# --- 7. bad paths and files exit 2, not "internal error" -----------------------------------------------
def test_bad_paths_and_files_are_bad_input(stored, tmp_path, capsys):
    db, run = stored
    (tmp_path / "file").write_text("x")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    for argv, says in ((["export", run, "--db", str(db), "--out", str(tmp_path / "missing" / "x.csv")],
                        "No such file or directory"),
                       (["export", run, "--db", str(db), "--out", str(tmp_path)], "Is a directory"),
                       (["compare", run, run, "--db", str(db), "--html", str(tmp_path)], "Is a directory"),
                       (["report", run, "--db", str(db), "--out", str(tmp_path / "file")], "is a file"),
                       (["survey", "--no-live", "--framework", "caffe", "--out", str(tmp_path / "file")], "is a file"),
                       (["run", "--suite", str(tmp_path / "binary.yaml"), "--db", str(tmp_path / "new.db")],
                        "not a YAML suite file")):
        assert main(argv) == 2, argv
        assert says in one_error_line(capsys.readouterr().err), argv
    assert (tmp_path / "file").read_text() == "x" and not (tmp_path / "new.db").exists()


# --- 9. what went wrong with the database, in words ----------------------------------------------------
def _error(fn) -> sqlite3.Error:
    try:
        fn()
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("no sqlite3 error")


def test_sqlite_errors_are_explained(tmp_path):
    db = tmp_path / "r.db"
    Store(db).close()
    ro = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    assert "the database is read-only" in explain(_error(lambda: ro.execute("INSERT INTO meta VALUES ('x', 'y')")))
    ro.close()
    rw = sqlite3.connect(db, isolation_level=None)
    assert "conflicts with what is stored" in explain(
        _error(lambda: rw.execute("INSERT INTO meta VALUES ('app', 'again')")))
    rw.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    assert "locked by another process" in explain(_error(lambda: other.execute("INSERT INTO meta VALUES ('z', 'z')")))
    rw.execute("ROLLBACK")
    assert "another dlbench version" in explain(_error(lambda: rw.execute("SELECT nope FROM meta")))
    (tmp_path / "junk").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    junk = sqlite3.connect(tmp_path / "junk")
    assert "not a database file, or a corrupt one" in explain(
        _error(lambda: junk.execute("SELECT * FROM sqlite_master").fetchall()))
    for conn in (rw, other, junk):
        conn.close()


def test_corrupt_file_and_other_schema_say_what_happened(tmp_path, capsys):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    assert main(["runs", "--db", str(junk)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "not a database file, or a corrupt one" in line and "another dlbench version" not in line
    assert junk.read_bytes() == b"SQLite format 3\x00" + b"\xff" * 4000
    db = tmp_path / "old.db"
    run = report_run(db)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE samples")  # as a dlbench with another schema would have left it
    conn.commit()
    conn.close()
    assert main(["show", run, "--db", str(db)]) == 2
    assert "another dlbench version" in one_error_line(capsys.readouterr().err)


def _read_only_prefix(directory: Path) -> list[str] | None:
    """A command prefix under which ``directory`` cannot be written: chmod for a normal user; for root
    (whom chmod does not stop) a read-only bind mount in a private user and mount namespace."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return []
    if shutil.which("unshare") is None:
        return None
    bind = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
    prefix = ["unshare", "-rm", "sh", "-c", bind, "sh", str(directory)]
    probe = subprocess.run([*prefix, "sh", "-c", f'! touch "{directory}/probe" 2>/dev/null'], capture_output=True)
    return prefix if probe.returncode == 0 else None


def test_archived_database_in_a_read_only_directory_can_be_read(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    db = archive / "results.db"
    run = report_run(db)
    before = db.read_bytes()
    prefix = _read_only_prefix(archive)
    if prefix is None:
        pytest.skip("running as root without unshare/mount namespaces: no directory root cannot write")
    try:
        def dlbench(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run([*prefix, sys.executable, "-m", "dlbench", *argv, "--db", str(db)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=300)

        assert dlbench("runs").returncode == 0
        shown = dlbench("show", run)
        assert shown.returncode == 1 and "internal error" not in shown.stderr  # 1: the run has a failed cell
        assert run in shown.stdout
        exported = dlbench("export", run, "--format", "json")
        assert exported.returncode == 0 and json.loads(exported.stdout)["run"]["id"] == run
        assert dlbench("report", run, "--out", str(tmp_path / "rep")).returncode == 0
        assert dlbench("compare", run, run).returncode == 0
        resumed = dlbench("run", "--resume", run)  # a writer: refused in words, before measuring
        assert resumed.returncode == 2 and "directory is not writable" in one_error_line(resumed.stderr)
    finally:
        archive.chmod(0o755)
    assert db.read_bytes() == before and sorted(p.name for p in archive.iterdir()) == ["results.db"]


def test_read_only_open_flags(stored, monkeypatch):
    """The open path itself, exercised as any user: with the directory reported unwritable a reader opens
    the file immutable (no -shm needed, none made) and a writer is refused before writing."""
    db, run = stored
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK and access(path, mode))
    store = Store(db, read_only=True)
    try:
        assert store.get_run(run)["id"] == run
        assert not Path(f"{db}-shm").exists() and not Path(f"{db}-wal").exists()
        with pytest.raises(sqlite3.Error):
            store.finish_run(run, "complete")
    finally:
        store.close()
    with pytest.raises(UsageError, match="directory is not writable"):
        Store(db)
    monkeypatch.undo()
    before = db.read_bytes()
    store = Store(db, read_only=True)  # writable directory: mode=ro, so still never a write
    with pytest.raises(sqlite3.Error, match="readonly"):
        store.finish_run(run, "complete")
    store.close()
    assert db.read_bytes() == before
