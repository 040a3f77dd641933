"""Databases as older dlbench versions wrote them, for the migration tests (the schema text of each
version verbatim, so a later change to store.SCHEMA cannot make these tests test nothing)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

#: store.SCHEMA + LEASES of schema version 2 (before precision was an axis)
V2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id TEXT PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL,
    suite_name TEXT, suite_json TEXT NOT NULL, argv TEXT);
CREATE TABLE environments (run_id TEXT PRIMARY KEY REFERENCES runs(id), data TEXT NOT NULL);
CREATE TABLE peaks (
    run_id TEXT REFERENCES runs(id), threads INTEGER, engine TEXT, gflops REAL,
    PRIMARY KEY (run_id, threads, engine));
CREATE TABLE verifications (
    run_id TEXT REFERENCES runs(id), framework TEXT, variant TEXT, model TEXT, device TEXT,
    verdict TEXT NOT NULL, reason TEXT, data TEXT,
    PRIMARY KEY (run_id, framework, variant, model, device));
CREATE TABLE cells (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), key TEXT NOT NULL,
    framework TEXT, variant TEXT, model TEXT, scenario TEXT, batch INTEGER, threads INTEGER, device TEXT,
    data TEXT NOT NULL DEFAULT 'synthetic', status TEXT NOT NULL, reason TEXT, finished_at REAL, seconds REAL,
    warnings TEXT, metrics TEXT,
    UNIQUE (run_id, key));
CREATE TABLE samples (
    cell_id INTEGER NOT NULL REFERENCES cells(id), repeat INTEGER NOT NULL, idx INTEGER NOT NULL,
    phase TEXT NOT NULL, value_ns REAL NOT NULL, loop_k INTEGER NOT NULL DEFAULT 1);
CREATE INDEX samples_by_cell ON samples(cell_id);
CREATE TABLE leases (
    run_id TEXT PRIMARY KEY REFERENCES runs(id), pid INTEGER NOT NULL, host TEXT NOT NULL, token TEXT NOT NULL,
    heartbeat REAL NOT NULL);
"""


def make_v2(path: Path, run_id: str = "old-run", status: str = "complete") -> str:
    """A version-2 database holding one finished run: a verdict, an ok cell with two samples."""
    conn = sqlite3.connect(path)
    with conn:
        conn.executescript(V2)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [("app", "dlbench"), ("schema_version", "2")])
        conn.execute("INSERT INTO runs VALUES (?, 1.0, 2.0, ?, 'old', '{\"models\": [\"lenet\"]}', '[]')",
                     (run_id, status))
        conn.execute("INSERT INTO verifications VALUES (?, 'torch', 'eager', 'lenet', 'cpu', 'pass', '', "
                     "'{\"forward_error\": 1e-7}')", (run_id,))
        conn.execute("INSERT INTO cells (id, run_id, key, framework, variant, model, scenario, batch, threads, device, "
                     "status, reason, finished_at, seconds, warnings, metrics) VALUES (1, ?, "
                     "'torch/eager/lenet/forward/b64/t1/cpu', 'torch', 'eager', 'lenet', 'forward', 64, 1, 'cpu', "
                     "'ok', '', 2.0, 1.0, '[]', '{}')", (run_id,))
        conn.executemany("INSERT INTO samples VALUES (1, 0, ?, 'measure', ?, 1)", [(0, 1e6), (1, 2e6)])
    conn.close()
    return run_id
