"""SQLite store: runs, their environment, verifications, cells and every raw sample.

The only module that speaks SQL. WAL mode, one transaction per finished cell, so a run killed
at any moment keeps every cell it finished. The schema version is stored and checked: a
database written by a newer dlbench, or a file that is not a dlbench database, is refused
with a one-line error rather than touched: the check runs on a read-only connection, before
anything is written. Commands that only read open the file read-only (``mode=ro``), so they work
on an archived database in a read-only directory. An older one is migrated in place
(additively) when a command that writes opens it.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.core.errors import UsageError
from dlbench.core.outputs import check_output as check_output  # moved to dlbench.core.outputs; importable here still
from dlbench.core.outputs import is_sqlite
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import PRECISIONS
from dlbench.storage.damage import (
    VERDICTS,
    clean_environment,
    clean_metrics,
    is_number,
    lease_problem,
    load_json,
    stricter,
)
from dlbench.storage.lease import judge

SCHEMA_VERSION = 3
APP = "dlbench"
DEFAULT_DB = Path("dlbench-results") / "results.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL,
    suite_name TEXT, suite_json TEXT NOT NULL, argv TEXT);
CREATE TABLE IF NOT EXISTS environments (run_id TEXT PRIMARY KEY REFERENCES runs(id), data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS peaks (
    run_id TEXT REFERENCES runs(id), threads INTEGER, engine TEXT, gflops REAL,
    PRIMARY KEY (run_id, threads, engine));
CREATE TABLE IF NOT EXISTS verifications (
    run_id TEXT REFERENCES runs(id), framework TEXT, variant TEXT, model TEXT, device TEXT,
    verdict TEXT NOT NULL, reason TEXT, data TEXT, precision TEXT NOT NULL DEFAULT 'fp32',
    PRIMARY KEY (run_id, framework, variant, model, device, precision));
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), key TEXT NOT NULL,
    framework TEXT, variant TEXT, model TEXT, scenario TEXT, batch INTEGER, threads INTEGER, device TEXT,
    data TEXT NOT NULL DEFAULT 'synthetic', status TEXT NOT NULL, reason TEXT, finished_at REAL, seconds REAL,
    warnings TEXT, metrics TEXT, precision TEXT NOT NULL DEFAULT 'fp32',
    UNIQUE (run_id, key));
CREATE TABLE IF NOT EXISTS samples (
    cell_id INTEGER NOT NULL REFERENCES cells(id), repeat INTEGER NOT NULL, idx INTEGER NOT NULL,
    phase TEXT NOT NULL, value_ns REAL NOT NULL, loop_k INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS samples_by_cell ON samples(cell_id);
"""

#: the driver measuring a run (see dlbench.storage.lease): one row while a process holds the run
LEASES = """CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY REFERENCES runs(id), pid INTEGER NOT NULL, host TEXT NOT NULL, token TEXT NOT NULL,
    heartbeat REAL NOT NULL)"""

#: ``dlbench bisect``'s bisections (dlbench.engines.bisect): settings and state as JSON, saved after every step so an
#: interrupted one resumes. Made when the first is saved; no schema version of its own (a database without
#: the table simply holds none, and an older dlbench ignores it)
BISECTIONS = """CREATE TABLE IF NOT EXISTS bisections (
    id TEXT PRIMARY KEY, started_at REAL NOT NULL, updated_at REAL NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL)"""

#: every table of a dlbench database: each is read through the checks of dlbench.storage.damage, and ``dlbench
#: check`` covers them all
TABLES = ("runs", "environments", "peaks", "verifications", "cells", "samples", "leases", "bisections")
#: rows that belong to a run or a cell, and the column that names it: one naming none is set aside by every reader
_OWNED = (("environments", "run_id", "runs"), ("peaks", "run_id", "runs"), ("verifications", "run_id", "runs"),
          ("cells", "run_id", "runs"), ("leases", "run_id", "runs"), ("samples", "cell_id", "cells"))

#: version 2 had no precision: every cell and verdict was float32, and a verdict's key had no
#: precision (SQLite cannot widen a primary key in place: the table is copied)
TO_V3 = [
    "ALTER TABLE cells ADD COLUMN precision TEXT NOT NULL DEFAULT 'fp32'",
    """CREATE TABLE verifications_v3 (
    run_id TEXT REFERENCES runs(id), framework TEXT, variant TEXT, model TEXT, device TEXT,
    verdict TEXT NOT NULL, reason TEXT, data TEXT, precision TEXT NOT NULL DEFAULT 'fp32',
    PRIMARY KEY (run_id, framework, variant, model, device, precision))""",
    "INSERT INTO verifications_v3 (run_id, framework, variant, model, device, verdict, reason, data) "
    "SELECT run_id, framework, variant, model, device, verdict, reason, data FROM verifications",
    "DROP TABLE verifications",
    "ALTER TABLE verifications_v3 RENAME TO verifications",
]

#: what takes a database from version v to v + 1 (version 1 had no leases, version 2 no precision)
MIGRATIONS = {1: [LEASES], 2: TO_V3}

#: the words of a damaged lease's note (Store.is_lease_note)
LEASE_NOTE = "its lease set aside (read as no live driver)"
CELL_STATUSES = ("ok", "failed", "unsupported", "timeout", "not_equivalent")
#: a cell row's text columns (index in :meth:`Store.cells`'s query, name): anything else there is damage
_CELL_TEXT = ((2, "key"), (3, "framework"), (4, "variant"), (5, "model"), (6, "scenario"), (9, "device"), (10, "data"),
              (11, "status"), (16, "precision"))


@dataclass
class Sample:
    repeat: int
    idx: int
    phase: str  # warmup, measure, first_call, compile_cold:<closure>, compile_warm:<closure>
    value_ns: float
    loop_k: int = 1


@dataclass
class CellRecord:
    id: int
    run_id: str
    key: str
    framework: str
    variant: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str
    data: str
    status: str
    reason: str
    seconds: float
    warnings: list[str]
    metrics: dict[str, Any]
    precision: str = DEFAULT_PRECISION


#: (device, inode) -> how many Stores of this process have that database file open. POSIX record locks
#: (SQLite's) belong to the process, and closing any descriptor of the file drops them all: another
#: Store of a file open here must not read its header with open() nor connect to it immutable (no
#: locks, a plain close). SQLite's own locking connections are safe (it defers such a close).
_HELD: Counter[tuple[int, int] | None] = Counter()
_HELD_LOCK = threading.Lock()


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _held(key: tuple[int, int] | None, change: int = 0) -> bool:
    """Whether this process has the file ``key`` open in a Store, after adding ``change`` to its count."""
    with _HELD_LOCK:
        _HELD[key] = max(_HELD[key] + change, 0)
        return key is not None and _HELD[key] > 0


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _archived(path: Path) -> bool:
    """A database SQLite cannot open in WAL mode even for reading: its directory cannot take the -shm
    file (read-only, as an archive often is) and no -wal is there to be read."""
    return not os.access(path.resolve().parent, os.W_OK) and not _sidecar(path, "-wal").exists()


def explain(exc: sqlite3.Error) -> str:
    """An sqlite3 error in words that say what happened (SQLite's own names are terse: "attempt to
    write a readonly database", "file is not a database")."""
    name = getattr(exc, "sqlite_errorname", None) or ""  # absent on errors raised by the sqlite3 module itself
    if name.startswith("SQLITE_READONLY"):
        return (f"the database is read-only ({exc}): the file, its directory (which must take the -wal and -shm "
                "files) or the file system is not writable")
    if name.startswith("SQLITE_CANTOPEN"):
        return f"cannot open the database file ({exc}): a missing or read-only directory?"
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or name.startswith("SQLITE_CORRUPT"):
        return f"not a database file, or a corrupt one ({exc})"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"the database is locked by another process ({exc}); try again when it has finished"
    if name.startswith("SQLITE_CONSTRAINT"):
        return f"a write conflicts with what is stored ({exc})"
    if name.startswith("SQLITE_FULL"):
        return f"the disk is full ({exc})"
    if name.startswith("SQLITE_IOERR"):
        return f"an I/O error on the database file ({exc})"
    if name == "SQLITE_ERROR" and ("no such" in str(exc) or "no column" in str(exc)):
        return f"{exc} (a schema from another dlbench version?)"
    return str(exc)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class Store:
    """``read_only``: for commands that only read (runs, show, export, report, compare): the file is
    opened with SQLite's ``mode=ro``, so an archived database in a read-only directory can be read."""

    def __init__(self, path: str | Path, create: bool = True, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        #: the file's schema version (an older one is migrated when a writing command opens it)
        self.version: int | None = None
        #: what reading has found damaged and set aside (dlbench.storage.damage), one line each, naming the run and cell
        self.damage: list[str] = []
        #: the cells reading has set aside: run -> {key: why}
        self.cells_set_aside: dict[str, dict[str, str]] = {}
        self.conn = self._open(create)
        self._inode: tuple[int, int] | None = _inode(self.path)
        _held(self._inode, +1)

    # --- opening and checking ------------------------------------------------------------
    def _open(self, create: bool) -> sqlite3.Connection:
        exists = self.path.exists()
        if not exists and (self.read_only or not create):
            raise UsageError(f"no dlbench database at {self.path}")
        held = exists and _held(_inode(self.path))
        if exists and not held:  # a file this process has open was checked when it was opened
            if self.path.is_dir():
                raise UsageError(f"{self.path} is a directory, not a database file")
            if not is_sqlite(self.path) and self.path.stat().st_size:
                raise UsageError(f"{self.path} is not a dlbench database (not an SQLite file)")
        fresh = not exists or self.path.stat().st_size == 0
        if not fresh:
            # checked through a read-only connection that leaves no -wal/-shm behind: a file that is
            # refused is never written, not even switched to WAL
            conn = self._connect_read_only(immutable=not held and not _sidecar(self.path, "-wal").exists())
            try:
                self.version = self._check(conn)
            finally:
                conn.close()
            fresh = self.version is None
        if self.read_only:
            if fresh:
                raise UsageError(f"no dlbench database at {self.path} (an empty file)")
            return self._connect_read_only(immutable=not held and _archived(self.path))
        if not exists:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot create a database at {self.path}: {exc.strerror}") from None
        if not os.access(self.path.resolve().parent, os.W_OK):
            raise UsageError(f"cannot write {self.path}: its directory is not writable (SQLite keeps the -wal and -shm "
                             "files there); commands that only read it still work")
        try:
            conn = sqlite3.connect(self.path, timeout=30)
            if fresh:
                with conn:
                    conn.executescript(SCHEMA + LEASES + ";")
                    conn.executemany("INSERT INTO meta VALUES (?, ?)",
                                     [("app", APP), ("schema_version", str(SCHEMA_VERSION))])
                self.version = SCHEMA_VERSION
            elif self.version < SCHEMA_VERSION:
                self._migrate(conn, self.version)
                self.version = SCHEMA_VERSION
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise UsageError(f"cannot write database {self.path}: {explain(exc)}") from None
        return conn

    def _connect_read_only(self, immutable: bool) -> sqlite3.Connection:
        """SQLite's ``mode=ro``: nothing is written; ``immutable=1`` also needs no -shm file, which a
        read-only directory (an archived database) cannot hold."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            return sqlite3.connect(uri, uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot read database {self.path}: {explain(exc)}") from None

    def _check(self, conn: sqlite3.Connection) -> int | None:
        """The schema version of the dlbench database the file holds (this version's, or an older one
        it migrates), None when it holds no table (a fresh file); :class:`UsageError` for anything else."""
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return None
            if "meta" not in tables:
                raise UsageError(f"{self.path} is not a dlbench database (it has other tables)")
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path} is not a dlbench database ({explain(exc)})") from None
        if meta.get("app") != APP:
            raise UsageError(f"{self.path} is not a dlbench database")
        raw = meta.get("schema_version", "0")
        try:
            version = int(raw)
        except (TypeError, ValueError):
            raise UsageError(f"{self.path}: schema version {raw!r} is not a number (a damaged dlbench database?)") \
                from None
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.path} has schema version {version}, newer than this dlbench understands "
                             f"({SCHEMA_VERSION}); upgrade dlbench")
        return version

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        """Bring a database of an older dlbench to SCHEMA_VERSION in one transaction; additive only, so
        what it holds reads the same afterwards."""
        if any(v not in MIGRATIONS for v in range(version, SCHEMA_VERSION)):
            raise UsageError(f"{self.path} has old schema version {version}; no migration known")
        try:
            conn.execute("BEGIN IMMEDIATE")
            for v in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[v]:
                    conn.execute(statement)
            conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
            conn.commit()
        except sqlite3.Error as exc:
            conn.rollback()
            raise UsageError(f"cannot upgrade {self.path} from schema version {version} to {SCHEMA_VERSION}: "
                             f"{exc}") from None

    @property
    def _precision(self) -> str:
        """The precision column, or float32 for a database read as it is from before precision was an
        axis (version 2 and older, opened read-only: not migrated)."""
        return "precision" if (self.version or SCHEMA_VERSION) >= 3 else "'fp32'"

    def reopen(self) -> Store:
        """Another connection to this database (for another thread)."""
        return Store(self.path, create=False)

    def close(self) -> None:
        self.conn.close()
        if self._inode is not None:
            _held(self._inode, -1)
            self._inode = None

    # --- runs -----------------------------------------------------------------------------
    def create_run(self, suite_name: str, suite: dict, argv: list[str] | None = None, run_id: str | None = None) -> str:
        run_id = run_id or new_run_id()
        with self.conn:
            self.conn.execute("INSERT INTO runs (id, started_at, status, suite_name, suite_json, argv) VALUES (?,?,?,?,?,?)",
                              (run_id, time.time(), "running", suite_name, json.dumps(suite), json.dumps(argv or [])))
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        with self.conn:
            self.conn.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (time.time(), status, run_id))

    def get_run(self, run_id: str) -> dict[str, Any]:
        row = self.conn.execute("SELECT id, started_at, finished_at, status, suite_name, suite_json, argv FROM runs "
                                "WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise UsageError(f"no run {run_id!r} in {self.path}")
        lease = self.lease(run_id)
        for value, what in ((row[3], "status"), (row[4], "suite name")):
            if not isinstance(value, str) and (value is not None or what == "status"):
                self._note(f"run {run_id}: its {what} is {value!r}, not text: read as {str(value)!r}")
        return {"id": row[0], "started_at": self._time(row[1], run_id, "start"),
                "finished_at": None if row[2] is None else self._time(row[2], run_id, "end"),
                "status": judge(str(row[3]), lease), "suite_name": None if row[4] is None else str(row[4]),
                "suite": self._json(row[5], dict, f"run {run_id}: its suite", {}),
                "argv": self._argv(row[6], run_id), "lease": lease}

    def _argv(self, text: Any, run_id: str) -> list[str]:
        argv = self._json(text, list, f"run {run_id}: its command line", [])
        if not all(isinstance(a, str) for a in argv):
            self._note(f"run {run_id}: its command line {argv!r} is not a list of words: read as empty")
            return []
        return argv

    def _json(self, text: Any, kind: type, what: str, default: Any) -> Any:
        """A stored JSON field; a damaged one reads as ``default``, noted in :attr:`damage`."""
        notes: list[str] = []
        value = load_json(text, kind, what, notes, default)
        self._note(*notes)
        return value

    def _time(self, value: Any, run_id: str, what: str) -> float:
        """A stored time (seconds since the epoch); a damaged one reads as 0 (1970), noted."""
        if is_number(value) and 0 <= value < 1e11:
            return float(value)
        self._note(f"run {run_id}: its {what} time is {value!r}: read as 1970-01-01")
        return 0.0

    def _note(self, *notes: str) -> None:
        self.damage += [n for n in notes if n not in self.damage]

    def set_aside(self, run_id: str, key: Any, why: str) -> None:
        """A cell of ``run_id`` left out of every view: noted in :attr:`damage`, and kept in :attr:`cells_set_aside`
        (by run, key -> why) for the readers that must not pass over it (``compare --fail-above``)."""
        self._note(f"run {run_id}: cell {key!s} set aside: {why}")
        self.cells_set_aside.setdefault(run_id, {})[str(key)] = why

    def latest_run_id(self) -> str:
        row = self.conn.execute("SELECT id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1").fetchone()
        if row is None:
            raise UsageError(f"no runs in {self.path}")
        return row[0]

    def list_runs(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("""
            SELECT r.id, r.started_at, r.finished_at, r.status, r.suite_name,
                   SUM(c.status = 'ok'), SUM(c.status IS NOT NULL AND c.status != 'ok')
            FROM runs r LEFT JOIN cells c ON c.run_id = r.id GROUP BY r.id ORDER BY r.started_at""").fetchall()
        return [{"id": r[0], "started_at": self._time(r[1], r[0], "start"),
                 "finished_at": None if r[2] is None else self._time(r[2], r[0], "end"),
                 "status": judge(str(r[3]), self.lease(r[0])),
                 "suite": r[4], "cells_ok": r[5] or 0, "cells_failed": r[6] or 0} for r in rows]

    # --- leases (dlbench.storage.lease decides who is alive; this only reads and writes the rows) ---------------
    def lease(self, run_id: str) -> dict[str, Any] | None:
        if self.version is not None and self.version < 2:  # an older database read as it is: no leases yet
            return None
        row = self.conn.execute("SELECT pid, host, token, heartbeat FROM leases WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None
        lease = {"pid": row[0], "host": row[1], "token": row[2], "heartbeat": row[3]}
        if found := lease_problem(lease):  # no driver can be told from it: a dead one's, taken over by a resume
            self._note(f"run {run_id}: {LEASE_NOTE}: {found}")
            return None
        return lease

    @staticmethod
    def is_lease_note(note: str) -> bool:
        """Whether a note of :attr:`damage` is about a lease (a resume takes such a lease over)."""
        return LEASE_NOTE in note

    def claim_lease(self, run_id: str, holder: dict[str, Any], live: Callable[[dict[str, Any]], bool]) -> dict | None:
        """Take ``run_id``'s lease for ``holder`` (pid, host, token, heartbeat) and mark the run running,
        unless a live driver holds it: that lease is returned then and nothing is written. One
        transaction (BEGIN IMMEDIATE), so two drivers resuming one run cannot both get it."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            held = self.lease(run_id)
            if held is not None and live(held):
                self.conn.rollback()
                return held
            self.conn.execute("INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?)",
                              (run_id, holder["pid"], holder["host"], holder["token"], holder["heartbeat"]))
            self.conn.execute("UPDATE runs SET status='running', finished_at=NULL WHERE id=?", (run_id,))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return None

    def beat_lease(self, run_id: str, holder: dict[str, Any], now: float) -> None:
        with self.conn:
            self.conn.execute("UPDATE leases SET heartbeat=? WHERE run_id=? AND pid=? AND host=? AND token=?",
                              (now, run_id, holder["pid"], holder["host"], holder["token"]))

    def release_lease(self, run_id: str, holder: dict[str, Any]) -> None:
        with self.conn:
            self.conn.execute("DELETE FROM leases WHERE run_id=? AND pid=? AND host=? AND token=?",
                              (run_id, holder["pid"], holder["host"], holder["token"]))

    # --- environment, peaks, verifications ------------------------------------------------------
    def save_environment(self, run_id: str, env: dict) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO environments VALUES (?, ?)", (run_id, json.dumps(env, default=str)))

    def environment(self, run_id: str) -> dict:
        row = self.conn.execute("SELECT data FROM environments WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return {}
        notes: list[str] = []
        env = clean_environment(load_json(row[0], dict, f"run {run_id}: its environment", notes, {}),
                                f"run {run_id}: its environment", notes)
        self._note(*notes)
        return env

    def save_peak(self, run_id: str, threads: int, rates: dict[str, float]) -> None:
        with self.conn:
            self.conn.executemany("INSERT OR REPLACE INTO peaks VALUES (?,?,?,?)",
                                  [(run_id, threads, engine, rate) for engine, rate in rates.items()])

    def peaks(self, run_id: str) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        rows = self.conn.execute("SELECT threads, engine, gflops FROM peaks WHERE run_id=?", (run_id,))
        for threads, engine, rate in rows:
            if not is_number(rate) or rate <= 0 or not isinstance(threads, int) or not isinstance(engine, str):
                self._note(f"run {run_id}: the machine peak of {engine} at {threads!r} thread(s) is {rate!r}: set aside")
                continue
            out.setdefault(threads, {})[engine] = rate
        return out

    def save_verification(self, run_id: str, framework: str, variant: str, model: str, device: str, verdict: str,
                          reason: str, data: dict, precision: str = DEFAULT_PRECISION) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO verifications (run_id, framework, variant, model, device, "
                              "verdict, reason, data, precision) VALUES (?,?,?,?,?,?,?,?,?)",
                              (run_id, framework, variant, model, device, verdict, reason, json.dumps(data, default=str),
                               precision))

    def verifications(self, run_id: str) -> dict[tuple[str, str, str, str, str], dict]:
        """Verdicts by :attr:`dlbench.core.cell.Cell.group`: (framework, variant, model, device, precision).
        Where the verdict column and the record's JSON disagree, the stricter stands (noted): a ``fail`` in
        either is never shown as verified."""
        rows = self.conn.execute(f"SELECT framework, variant, model, device, {self._precision}, verdict, reason, data "
                                 "FROM verifications WHERE run_id=?", (run_id,))
        out = {}
        for r in rows:
            what = f"run {run_id}: the gate's record of {r[0]} {r[1]} {r[2]} {r[3]} {r[4]}"
            if not all(isinstance(v, str) for v in r[:5]):
                self._note(f"{what} set aside: its framework, variant, model, device and precision are not all text")
                continue
            record = self._json(r[7], dict, what, {})
            column, kept = r[5], record.get("verdict", r[5])
            verdict = stricter(column, kept)
            if column != kept:
                self._note(f"{what}: its verdict column says {column!r}, its record {kept!r}: read as {verdict!r}")
            elif verdict not in VERDICTS:
                self._note(f"{what}: its verdict {verdict!r} is not one dlbench writes: not a pass")
            if not isinstance(verdict, str):
                verdict = "unknown"
            reason = r[6] if verdict == column else record.get("reason", r[6])
            out[tuple(r[:5])] = {**record, "verdict": verdict, "reason": reason}
        return out

    def orphans(self) -> list[str]:
        """A note for each row that names a run or cell the database does not hold (no reader ever shows it)."""
        out = []
        for table, column, owner in _OWNED:
            if self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is None:
                continue
            rows = self.conn.execute(f"SELECT rowid, {column} FROM {table} WHERE {column} IS NULL OR {column} NOT IN "
                                     f"(SELECT id FROM {owner})").fetchall()
            out += [f"{table} row {rowid}: its {column} {value!r} names no row of {owner}: set aside"
                    for rowid, value in rows]
        return out

    # --- files kept with a run ---------------------------------------------------------------
    def artifacts_dir(self, run_id: str) -> Path:
        """Where a run's files live beside the database (profiler traces, LoadGen logs): one directory
        per run, made by whoever writes the first file, removed with nothing else."""
        return self.path.parent / "artifacts" / run_id

    # --- bisections (dlbench.engines.bisect) ------------------------------------------------------------
    def save_bisection(self, bisection_id: str, started_at: float, status: str, data: dict) -> None:
        with self.conn:
            self.conn.execute(BISECTIONS)
            self.conn.execute("INSERT OR REPLACE INTO bisections VALUES (?,?,?,?,?)",
                              (bisection_id, started_at, time.time(), status, json.dumps(data, default=str)))

    def claim_bisection(self, bisection_id: str, holder: dict[str, Any],
                        live: Callable[[dict[str, Any]], bool]) -> dict | None:
        """Make ``holder`` the driver of a stored bisection and mark it running, unless a live driver
        has it: that driver is returned then and nothing is written. One transaction (BEGIN
        IMMEDIATE), so two ``bisect --resume`` of one bisection cannot both get it."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute("SELECT status, data FROM bisections WHERE id=?", (bisection_id,)).fetchone()
            data = load_json(row[1], dict, "its record", [], {}) if row is not None else {}
            driver = data.get("driver")
            if row is not None and row[0] == "running" and driver and live(driver):
                self.conn.rollback()
                return driver
            if row is not None:
                data.update(driver=holder, status="running")
                self.conn.execute("UPDATE bisections SET status='running', updated_at=?, data=? WHERE id=?",
                                  (time.time(), json.dumps(data, default=str), bisection_id))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return None

    def bisections(self) -> list[tuple[str, dict[str, Any] | str]]:
        """Every stored bisection, oldest first (none where the table was never made): (its id, its data), or
        (its id, what is wrong with it) where the data is not a JSON mapping of that id. Whether the mapping is a
        bisection is for its reader to say (:meth:`dlbench.report.bisection.Bisection.from_stored`)."""
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='bisections'").fetchone() is None:
            return []
        out: list[tuple[str, dict[str, Any] | str]] = []
        for bisection_id, text in self.conn.execute("SELECT id, data FROM bisections ORDER BY started_at, rowid"):
            notes: list[str] = []
            data = load_json(text, dict, "its record", notes, None)
            if data is None and not notes:
                notes.append("its record is empty")
            elif data is not None and data.get("id") != bisection_id:
                notes.append(f"its record names bisection {data.get('id')!r}")
            out.append((str(bisection_id), "; ".join(notes) if notes else data))
        return out

    # --- cells and samples ------------------------------------------------------------------
    def save_cell(self, run_id: str, cell: dict, status: str, reason: str, seconds: float, warnings: list[str],
                  metrics: dict, samples: Iterable[Sample]) -> int:
        if status not in CELL_STATUSES:
            raise ValueError(f"bad cell status {status!r}")
        with self.conn:
            cur = self.conn.execute(
                "INSERT INTO cells (run_id, key, framework, variant, model, scenario, batch, threads, device, data, "
                "status, reason, finished_at, seconds, warnings, metrics, precision) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, cell["key"], cell["framework"], cell["variant"], cell["model"], cell["scenario"], cell["batch"],
                 cell["threads"], cell["device"], cell.get("data", "synthetic"), status, reason, time.time(), seconds,
                 json.dumps(warnings), json.dumps(metrics, default=str), cell.get("precision", DEFAULT_PRECISION)))
            cell_id = cur.lastrowid
            self.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)",
                                  [(cell_id, s.repeat, s.idx, s.phase, s.value_ns, s.loop_k) for s in samples])
        return int(cell_id)

    def done_keys(self, run_id: str) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT key FROM cells WHERE run_id=?", (run_id,))}

    def cells(self, run_id: str) -> list[CellRecord]:
        rows = self.conn.execute(
            "SELECT id, run_id, key, framework, variant, model, scenario, batch, threads, device, data, status, reason, "
            f"seconds, warnings, metrics, {self._precision} FROM cells WHERE run_id=? ORDER BY id", (run_id,)).fetchall()
        out = []
        for r in rows:
            notes: list[str] = []
            warnings = load_json(r[14], list, "its warnings", notes, [])
            metrics = load_json(r[15], dict, "its metrics", notes, {})
            if r[16] not in PRECISIONS:
                notes.append(f"its precision {r[16]!r} is not one this dlbench knows")
            if not isinstance(r[7], int) or not isinstance(r[8], int):
                notes.append(f"batch {r[7]!r} and threads {r[8]!r} are not counts")
            notes += [f"its {name} is {r[i]!r}, not text" for i, name in _CELL_TEXT if not isinstance(r[i], str)]
            if r[12] is not None and not isinstance(r[12], str):
                notes.append(f"its reason is {r[12]!r}, not text")
            if r[11] not in CELL_STATUSES:
                notes.append(f"its status {r[11]!r} is not one dlbench writes")
            if notes:  # a cell whose stored fields cannot be read is set aside, named, not guessed at
                self.set_aside(run_id, r[2], "; ".join(notes))
                continue
            figures: list[str] = []  # optional figures that do not fit: the cell is read without them
            metrics = clean_metrics(metrics, figures)
            if r[13] is not None and not (is_number(r[13]) and r[13] >= 0):
                figures.append(f"its wall time {r[13]!r} is not a time: read as 0 s")
            self._note(*(f"run {run_id}: cell {r[2]!s}: {f}" for f in figures))
            out.append(CellRecord(*r[:12], r[12] or "", r[13] if is_number(r[13]) and r[13] >= 0 else 0.0,
                                  [str(w) for w in warnings], metrics, r[16]))
        return out

    def samples(self, cell_id: int, phase: str | None = None) -> list[Sample]:
        query = "SELECT repeat, idx, phase, value_ns, loop_k FROM samples WHERE cell_id=?"
        args: tuple = (cell_id,)
        if phase is not None:
            query += " AND phase=?"
            args += (phase,)
        return [Sample(*r) for r in self.conn.execute(query + " ORDER BY repeat, idx", args)]
