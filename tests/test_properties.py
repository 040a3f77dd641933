"""Property tests (hypothesis) for the input and the store (issue #31, "beyond the list"): numbers were
validated one flag at a time, and readers trusted every stored row. Whatever the value of a numeric
flag or suite field, whatever document a suite file holds, whatever damage a database row takes, the
answer is a result or one line with exit 2: never a traceback nor "internal error", and no stored byte
changes.

Bounded for CI: few examples each, no deadline, derandomized (the same examples every run).
Nothing here measures (``runner.start`` stops after validating, see tests/test_bad_input_flags.py).
"""

import hashlib
import math
import shutil
import sqlite3

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.planning.plan import load_suite
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
