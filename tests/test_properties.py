"""Property tests (hypothesis) for the input and the store (issue #31, "beyond the list"): numbers were
validated one flag at a time, and readers trusted every stored row. Whatever the value of a numeric
flag or suite field, whatever document a suite file holds, whatever damage a database row takes, the
answer is a result or one line with exit 2: never a traceback nor "internal error", and no stored byte
changes.

Bounded for CI: few examples each, no deadline, derandomized (the same examples every run).
Nothing here measures (``runner.start`` stops at once, the plan having validated everything; see
tests/test_bad_input_flags.py).
"""

import hashlib
import json
import math
import shutil
import sqlite3
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.core.precision import PRECISIONS
from dlbench.planning.plan import load_suite
from dlbench.storage.store import CELL_STATUSES
from tests.synthetic_runs import compare_pair
from tests.test_bad_input_flags import GPU, no_measuring, run_args  # noqa: F401

BOUNDED = settings(max_examples=40, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

NUMERIC_FLAGS = ["--qps", "--p99-ms", "--loadgen-min-queries", "--loadgen-min-duration", "--latency-calls", "--timeout",
                 "--min-time", "--warmup", "--min-iters", "--repeats", "--profile", "--epochs", "--target-accuracy",
                 "--lr", "--seed", "--batch", "--threads"]

#: non-ASCII digits Python's int() and float() would read (Arabic-Indic, Devanagari, full-width, Bengali)
FOREIGN_DIGITS = st.text(alphabet="٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３４５６７８９০১২৩", min_size=1, max_size=6)
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["inf", "-inf", "nan", "NaN", "1e999", "-0", "0", "1e-320", "9" * 40, "0x10", "1_000", " 5 ",
                     "+3", "1,2", ".5", "5.", "1e3"]),
    FOREIGN_DIGITS,
    st.text(max_size=8),
)


def _one_line_or_accepted(capsys, argv: list[str]) -> int:
    code = main(argv)
    err = capsys.readouterr().err
    if code == 1 and "Measured: would" in err:  # accepted: it got as far as measuring (the stand-in stops there)
        return code
    if code == 0 and "--dry-run" in argv:  # accepted: the plan was printed
        return code
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert code == 2 and len(err.strip().splitlines()) == 1, (argv, code, err)
    return code


@BOUNDED
@given(flag=st.sampled_from(NUMERIC_FLAGS), value=NUMBER_TEXT)
def test_any_value_of_a_numeric_flag_is_accepted_or_refused_in_one_line(capsys, tmp_path, flag, value):
    if value.startswith("-") and value != "-":
        argv = [a for a in run_args(tmp_path) if a != flag] + [f"{flag}={value}"]  # argparse reads -x as a flag
    else:
        argv = run_args(tmp_path, flag, value)
    code = _one_line_or_accepted(capsys, argv)
    if any(ch.isdigit() and not ch.isascii() for ch in value):
        assert code == 2  # a number in non-ASCII digits is never read as one
    if value.strip().lower() in ("inf", "-inf", "nan", "1e999") and flag not in ("--batch", "--threads"):
        assert code == 2


SETTING_FIELDS = {
    "protocol": ["warmup", "min_iters", "min_time_s", "repeats", "max_time_s", "timeout_s", "profile_calls"],
    "serving": ["latency_calls", "qps", "p99_ms", "min_duration_s", "min_queries"],
    "convergence": ["epochs", "target_accuracy", "lr", "log_steps"],
    "distributed": ["ps_shards", "nnodes", "node_rank"],
}
YAML_NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**30), max_value=10**30),
    FOREIGN_DIGITS, st.sampled_from([".inf", "-.inf", ".nan", "1e999", True, None, [], {}]),
)


@BOUNDED
@given(section=st.sampled_from([*SETTING_FIELDS, "seed"]), data=st.data())
def test_any_value_of_a_suite_field_is_accepted_or_refused_in_one_line(capsys, tmp_path, section, data):
    value = data.draw(YAML_NUMBER)
    if section == "seed":
        body = {"seed": value}
    else:
        body = {section: {data.draw(st.sampled_from(SETTING_FIELDS[section])): value}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"models": ["lenet"], "frameworks": ["gpufw"], "scenarios": ["forward"],
                                    "threads": [1], **body}, allow_unicode=True))
    code = _one_line_or_accepted(capsys, ["run", "--suite", str(path), "--db", str(tmp_path / "r.db")])
    if isinstance(value, float) and not math.isfinite(value) or isinstance(value, int) and abs(value) > 10**20:
        assert code == 2


# --- the suite loader against generated documents -----------------------------------------------------
KEYS = ["name", "description", "frameworks", "variants", "models", "scenarios", "batch_sizes", "threads", "devices",
        "precisions", "exclude", "installed_except", "data", "data_dir", "protocol", "convergence", "seed",
        "distributed", "serving", "lenett", "", "batch_sizes\n"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["lenet", "gpufw", "forward", "all", "default", "fp32", "installed", "digits"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.sampled_from(KEYS + ["lenet", "timeout_s",
                                                                                              "qps", "gpufw"]),
                                                                      inner, max_size=4)),
                      max_leaves=12)


@BOUNDED
@given(document=st.one_of(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8), VALUES))
def test_the_suite_loader_accepts_or_refuses_any_document_in_one_line(tmp_path, document):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    try:
        load_suite(str(path))
    except UsageError as exc:
        assert "\n" not in str(exc).strip(), str(exc)


@BOUNDED
@given(text=st.text(max_size=200))
def test_the_suite_loader_accepts_or_refuses_any_text_in_one_line(tmp_path, text):
    path = tmp_path / "s.yaml"
    try:
        path.write_text(text, encoding="utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate cannot be a file's text
    try:
        load_suite(str(path))
    except UsageError as exc:
        assert "\n" not in str(exc).strip(), str(exc)


# --- readers against databases with generated damage ----------------------------------------------------
@pytest.fixture(scope="module")
def template(tmp_path_factory):
    db = tmp_path_factory.mktemp("template") / "r.db"
    a, b = compare_pair(db)
    return db, a, b


COLUMNS = [("samples", "value_ns"), ("samples", "repeat"), ("samples", "loop_k"), ("samples", "phase"),
           ("cells", "metrics"), ("cells", "warnings"), ("cells", "batch"), ("cells", "threads"), ("cells", "status"),
           ("cells", "seconds"), ("cells", "scenario"), ("runs", "suite_json"), ("runs", "argv"),
           ("runs", "started_at"), ("environments", "data"), ("verifications", "data"), ("peaks", "gflops"),
           ("peaks", "threads")]
STORED = st.one_of(
    st.sampled_from(["NaN", "nan", "inf", "-inf", "", "{bad", "[bad", "null", "[]", "{}", "1e999", "\x00", "x",
                     '{"peak_rss_bytes": "x"}', '{"loop_k": -1}', '{"device_memory": 5}', '["a", 1, null]',
                     '{"latency": []}', '{"loadgen": "x"}']),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.none(),
    st.binary(max_size=8), st.text(max_size=10),
)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damage=st.lists(st.tuples(st.sampled_from(COLUMNS), STORED, st.integers(min_value=1, max_value=40)),
                       min_size=1, max_size=3))
def test_readers_survive_any_damage_and_write_nothing(capsys, tmp_path, template, damage):
    source, a, b = template
    db = tmp_path / "r.db"
    shutil.copyfile(source, db)
    conn = sqlite3.connect(db)
    try:
        with conn:
            for (table, column), value, row in damage:
                try:
                    conn.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, row))
                except sqlite3.IntegrityError:
                    pass  # a NOT NULL column refuses NULL: SQLite itself keeps that damage out
    finally:
        conn.close()
    before = _digest(db)
    for argv in (["runs"], ["show", a], ["show", b, "--json"], ["show", a, "--warnings"], ["export", a],
                 ["export", b, "--format", "json"], ["compare", a, b], ["check"],
                 ["history", "--framework", "fakefw", "--model", "lenet", "--scenario", "forward", "--batch", "4"]):
        code = main([*argv, "--db", str(db)])
        out, err = capsys.readouterr()
        assert "Traceback" not in err and "internal error" not in err, (argv, damage, err)
        assert code in (0, 1, 2), (argv, code, err)
    assert _digest(db) == before, damage


@BOUNDED
@given(extra=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4))
def test_a_run_of_any_suite_document_is_accepted_or_refused_in_one_line(capsys, tmp_path, extra):
    """The loader's checks, then everything a run checks before it measures (the registries, the data)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"models": ["lenet"], "frameworks": ["gpufw"], "scenarios": ["forward"],
                                    "threads": [1], **extra}, allow_unicode=True))
    _one_line_or_accepted(capsys, ["run", "--suite", str(path), "--db", str(tmp_path / "r.db")])
    _one_line_or_accepted(capsys, ["run", "--suite", str(path), "--dry-run", "--db", str(tmp_path / "r.db")])


# --- any single-cell corruption: every other run reads as before, and check names it (issue #41) ------------------
WORD = st.text(alphabet=string.ascii_letters, min_size=1, max_size=6)  # text SQLite keeps as text in any column
BLOB = st.sampled_from([b"\x00", b"\xff\xfe", b"\x01x"])
NOT_JSON = st.sampled_from(["{bad", "[bad", "nan?", "{'a': 1}", "[1,]"])
NOT_A_MAPPING = st.sampled_from(["[]", "[1]", "5", '"x"', "null", "true"])
NOT_A_LIST = st.sampled_from(["{}", "5", '"x"', "null", '{"a": 1}'])
NOT_A_COUNT = st.one_of(WORD, BLOB, st.sampled_from([1.5, -2.5]))
NOT_A_TIME = st.one_of(WORD, BLOB, st.sampled_from([-1.0, -5e6, float("inf"), float("-inf")]))
#: the gate's verdicts (dlbench.gate.verify, and "unknown" where a cell has none)
VERDICTS = ("pass", "fail", "unsupported", "not_equivalent", "unknown")
#: (table, column) -> values that cannot be what dlbench wrote there (the schema's contract, column by column:
#: a plausible number in a time column cannot be told from a measurement, so it is not among them)
CORRUPTIONS = {
    "cells": {
        "batch": st.one_of(NOT_A_COUNT, st.none()), "threads": st.one_of(NOT_A_COUNT, st.none()),
        "key": BLOB, "framework": st.one_of(BLOB, st.none()), "variant": st.one_of(BLOB, st.none()),
        "model": st.one_of(BLOB, st.none()), "scenario": st.one_of(BLOB, st.none()), "device": st.one_of(BLOB, st.none()),
        "data": BLOB, "reason": BLOB, "seconds": NOT_A_TIME,
        "status": st.one_of(BLOB, WORD.filter(lambda w: w not in CELL_STATUSES)),
        "precision": st.one_of(BLOB, WORD.filter(lambda w: w not in PRECISIONS)),
        "metrics": st.one_of(NOT_JSON, NOT_A_MAPPING, BLOB, st.sampled_from(
            ['{"peak_rss_bytes": "x"}', '{"cost": "x"}', '{"cost": {"timed_s": "x"}}', '{"variance": [1]}',
             '{"reused": 5}', '{"device_memory": 5}', '{"loop_k": -1}', '{"adaptive": {"half_width": "x"}}'])),
        "warnings": st.one_of(NOT_JSON, NOT_A_LIST, BLOB),
        "run_id": WORD,
    },
    "samples": {"value_ns": st.one_of(NOT_A_TIME, st.just(0.0)), "repeat": st.one_of(NOT_A_COUNT, st.just(-1)),
                "idx": st.one_of(NOT_A_COUNT, st.just(-1)), "loop_k": st.one_of(NOT_A_COUNT, st.sampled_from([0, -1])),
                "phase": BLOB, "cell_id": st.one_of(WORD, st.just(999))},
    "runs": {"suite_json": st.one_of(NOT_JSON, NOT_A_MAPPING, BLOB),
             "argv": st.one_of(NOT_JSON, NOT_A_LIST.filter(lambda t: t != "[]"), BLOB, st.just("[1]")),
             "started_at": st.one_of(NOT_A_TIME, st.just(1e13)), "status": BLOB, "suite_name": BLOB},
    "environments": {"data": st.one_of(NOT_JSON, NOT_A_MAPPING, BLOB, st.sampled_from(
        ['{"cpu": 5}', '{"gpus": "x"}', '{"frameworks": []}', '{"cpu": {"flags": 7}}', '{"memory_bytes": "x"}'])),
        "run_id": WORD},
    "peaks": {"gflops": st.one_of(NOT_A_TIME, st.just(0.0)), "threads": NOT_A_COUNT, "engine": BLOB, "run_id": WORD},
    "verifications": {"data": st.one_of(NOT_JSON, NOT_A_MAPPING, BLOB, st.just('{"verdict": "fail"}')),
                      "verdict": st.one_of(BLOB, WORD.filter(lambda w: w not in VERDICTS)),
                      "framework": st.one_of(BLOB, st.none()), "precision": BLOB, "run_id": WORD},
    "leases": {"pid": st.one_of(NOT_A_COUNT, st.sampled_from([0, -4])), "host": BLOB, "token": BLOB,
               "heartbeat": st.one_of(WORD, BLOB, st.sampled_from([float("inf")])), "run_id": WORD},
    "bisections": {"data": st.one_of(NOT_JSON, NOT_A_MAPPING, BLOB, st.sampled_from(
        ['{}', '{"id": "b-ok"}', '{"id": "b-other"}']))},
}
#: the columns that tie a row to its run or cell: damage there makes a row that names none
OWNERS = ("run_id", "cell_id")


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Runs A and B of four cells, a third run C of one, a lease (a driver long gone) on A, a bisection; what each
    run's views print, and which run (and cell) each row of each table belongs to."""
    from dlbench.storage.store import Store
    from tests.synthetic_runs import cell, finish, metrics, new_run, timed_samples, verify_pass
    from tests.test_damaged_rows import _bisection

    tmp = tmp_path_factory.mktemp("three")
    db = tmp / "r.db"
    a, b = compare_pair(db)
    store = Store(db)
    c = new_run(store, "third")
    verify_pass(store, c, "fakefw", "ok")
    store.save_cell(c, cell("fakefw", "ok", "forward", 2, 1), "ok", "", 1.0, [], metrics(), timed_samples(3.0, seed=9))
    finish(store, c)
    store.conn.execute("INSERT INTO leases VALUES (?, 1, 'elsewhere', '', 1.0)", (a,))
    store.conn.commit()
    _bisection(store)
    store.close()
    conn = sqlite3.connect(db)
    owner = {"runs": dict(conn.execute("SELECT rowid, id FROM runs")),
             "samples": dict(conn.execute("SELECT s.rowid, c.run_id FROM samples s JOIN cells c ON c.id = s.cell_id")),
             "bisections": dict.fromkeys(r for (r,) in conn.execute("SELECT rowid FROM bisections"))}
    for table in ("cells", "environments", "peaks", "verifications", "leases"):
        owner[table] = dict(conn.execute(f"SELECT rowid, run_id FROM {table}"))
    keys = {"cells": dict(conn.execute("SELECT rowid, key FROM cells")),
            "samples": dict(conn.execute("SELECT s.rowid, c.key FROM samples s JOIN cells c ON c.id = s.cell_id"))}
    conn.close()
    views = {r: {tuple(argv): _view(argv, db) for argv in _views(r)} for r in (a, b, c)}
    return db, owner, keys, views


def _views(run_id: str) -> list[list[str]]:
    return [["show", run_id, "--json"], ["export", run_id, "--format", "json"], ["show", run_id, "--cost", "--json"],
            ["show", run_id, "--warnings"]]


def _view(argv: list[str], db) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--db", str(db)])
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), (argv, err.getvalue())
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("table", list(CORRUPTIONS))
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_single_cell_corruption_leaves_every_other_run_as_it_was_and_check_names_it(tmp_path, three_runs, table,
                                                                                        data):
    source, owner, keys, views = three_runs
    column = data.draw(st.sampled_from(sorted(CORRUPTIONS[table])), label="column")
    value = data.draw(CORRUPTIONS[table][column], label="value")
    rowid = data.draw(st.sampled_from(sorted(owner[table])), label="row")
    db = tmp_path / "r.db"
    shutil.copyfile(source, db)
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
    conn.close()
    damaged_run = owner[table][rowid]  # None: a bisection, no run's
    before = _digest(db)
    for run_id, expected in views.items():  # every other run reads exactly as before
        if run_id != damaged_run:
            for argv, seen in expected.items():
                assert _view(list(argv), db) == seen, (table, column, value, argv)
    if damaged_run is not None:  # the damaged run itself still reads, and so do its other cells
        code, out, err = _view(["export", damaged_run, "--format", "json"], db)
        assert code == 0, err
        key = keys.get(table, {}).get(rowid)
        if key is not None and column not in OWNERS:
            cells = {c["key"]: c for c in json.loads(out)["cells"]}
            _, was, _ = views[damaged_run][("export", damaged_run, "--format", "json")]
            for c in json.loads(was)["cells"]:
                if c["key"] != key:
                    assert cells.get(c["key"]) == c, (table, column, value, c["key"])
    code, out, err = _view(["check"], db)
    if column in OWNERS:
        name = f"{table} row {rowid}"
    elif table == "bisections":
        name = "bisection b-ok"
    else:
        name = f"run {damaged_run}"
    assert code == 1 and name in out, (table, column, value, out)
    if key := (keys.get(table, {}).get(rowid) if column not in (*OWNERS, "key") else None):
        assert key in out, (table, column, value, out)
    assert _digest(db) == before
