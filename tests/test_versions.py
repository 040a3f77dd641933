"""Framework versions (``jax==0.4.38``): the spec's parsing and refusals, the companion table, one environment
per version (built by a faked installer: no real pip here), a version that cannot be installed as
``unsupported`` with pip's reason, the framework's identity in tables, and regressions between versions
flagged by ``history`` and ``compare --baseline`` (and an identical re-run not flagged)."""

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from dlbench import api, envs
from dlbench.cli.main import main
from dlbench.envs import companions, versions
from dlbench.frameworks import UnknownFrameworkError, check_frameworks, framework_info, installed_version, ondemand
from dlbench.report.compare import compare_versions
from dlbench.report.summary import summary_rows
from dlbench.report.versions import history, run_series
from dlbench.storage.store import SCHEMA_VERSION, Store
from tests.conftest import requires
from tests.old_schema import make_v2
from tests.synthetic_runs import ENV, cell, finish, metrics, timed_samples

BAD = [("jax==", "no version after '=='"), ("jax==abc", "'abc' is not a release number"),
       ("nosuch==1.0", "unknown framework 'nosuch'"), ("==1.0", "no framework before"),
       ("jax>=0.4", "only an exact version"), ("mxnet==1.9.1", "cannot be pinned"),
       ("tensorflow==2.15.1", "Keras 2")]


@pytest.fixture(autouse=True)
def envs_dir(tmp_path, monkeypatch):
    root = tmp_path / "envs"
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(root))
    return root


def test_a_pinned_name_is_its_base_framework_at_that_version():
    info = framework_info("jax==0.4.38")
    assert (info.name, info.base, info.version, info.module) == ("jax==0.4.38", "jax", "0.4.38",
                                                                 "dlbench.frameworks.jax.backend")
    assert framework_info("jax").version is None and framework_info("jax").base == "jax"
    assert versions.split("tensorflow==2.18.1") == ("tensorflow", "2.18.1")
    assert versions.split("onnxruntime") == ("onnxruntime", None)
    assert framework_info("jax==99.0").version == "99.0.0"  # well formed: pip decides whether it exists


@pytest.mark.parametrize("spec, message", BAD)
def test_bad_specs_are_one_line_refusals(spec, message, capsys):
    with pytest.raises(UnknownFrameworkError, match=message):
        framework_info(spec)
    for argv in (["verify", "--framework", spec, "--model", "lenet"], ["run", "--framework", spec, "--dry-run"],
                 ["envs", "create", spec]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message.split("'")[0] in err and "\n" not in err and "Traceback" not in err


def test_the_api_refuses_bad_specs_as_the_cli_does():
    from dlbench.core.errors import UsageError

    with pytest.raises(UsageError, match="no version after"):
        api.verify(frameworks=["jax=="], models=["lenet"])
    with pytest.raises(UsageError, match="not a release number"):
        api.run(frameworks=["jax==abc"], models=["lenet"])


def test_release_order():
    keys = [companions.release_key(v) for v in ("0.4.9", "0.4.38", "0.9.0", "0.9.0.1", "2.16.0rc1", "2.16.0",
                                                 "2.16.0.post1", "2.16.1")]
    assert keys == sorted(keys)
    with pytest.raises(ValueError):
        companions.release_key("1.x")


@pytest.mark.parametrize("framework", companions.pinnable())
def test_the_companion_table_resolves_every_release_line(framework):
    lines = companions.LINES[framework]
    assert [companions.release_key(line.first) for line in lines] == sorted(companions.release_key(line.first)
                                                                            for line in lines)
    dist = companions.DISTRIBUTION[framework]
    for i, line in enumerate(lines):
        later = line.first.rsplit(".", 1)[0] + ".99" if i + 1 == len(lines) else line.first
        for version in (line.first, later):
            reqs = companions.companions(framework, version)
            assert reqs[0] == f"{dist}=={version}" and companions.line_for(framework, version) is line
            assert all("==" in r and "{" not in r for r in reqs), reqs
            assert len({r.split("==")[0] for r in reqs}) == len(reqs)  # nothing pinned twice
            # pinned in the release's normal spelling (fakerel's 1.0 is 1.0.0; pip holds them equal)
            assert envs.requirements(f"{framework}=={version}") == (
                companions.companions(framework, versions.normal_version(version)), [])
    with pytest.raises(ValueError, match="older than the oldest"):
        companions.line_for(framework, "0.0.1")


def test_companions_of_the_lines_dlbench_supports():
    assert companions.companions("jax", "0.4.38")[:3] == ["jax==0.4.38", "jaxlib==0.4.38", "flax==0.10.2"]
    assert "keras==3.3.3" in companions.companions("tensorflow", "2.16.2")
    assert "numpy==1.26.4" in companions.companions("onnxruntime", "1.17.3")
    assert "torch==2.13.0" in companions.companions("onnxruntime", "1.20.1")


def _fake_env(root: Path, name: str, version: str, python: str = sys.executable) -> Path:
    path = envs.env_path(name)
    path.mkdir(parents=True)
    reqs, build = envs.requirements(name)
    record = envs.EnvRecord(framework=name, path=str(path), python=python, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=1.0, framework_version=version,
                            versions={versions.base_of(name): version}, requirements=reqs, build_requirements=build)
    (path / envs.RECORD).write_text(json.dumps(record.to_dict()))
    return path


def test_each_version_has_its_own_environment(envs_dir):
    a, b = _fake_env(envs_dir, "jax==0.4.38", "0.4.38"), _fake_env(envs_dir, "jax==0.6.2", "0.6.2")
    assert a != b and a.parent == b.parent == envs_dir and "=" not in a.name + b.name
    assert envs.log_path("jax==0.4.38") != envs.log_path("jax==0.6.2")
    assert {r.framework for r in envs.list_envs()} == {"jax==0.4.38", "jax==0.6.2"}
    assert installed_version("jax==0.4.38") == "0.4.38" and installed_version("jax==0.6.2") == "0.6.2"
    assert envs.stale(envs.load("jax==0.4.38")) is None
    assert envs.python_for("jax") is None  # the bare name stays the main Python's
    assert main(["envs", "remove", "jax==0.4.38"]) == 0
    assert envs.load("jax==0.4.38") is None and envs.load("jax==0.6.2") is not None


def test_list_frameworks_names_each_pinned_release_with_an_environment(envs_dir, capsys):
    _fake_env(envs_dir, "jax==0.6.2", "0.6.2")
    _fake_env(envs_dir, "jax==0.4.38", "0.4.38")
    assert main(["list", "frameworks", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert [n for n in rows if "==" in n] == ["jax==0.4.38", "jax==0.6.2"]  # release order, after the bare names
    assert rows["jax==0.4.38"]["installed"] and rows["jax==0.4.38"]["version"] == "0.4.38"
    assert rows["jax==0.4.38"]["python"] and rows["jax==0.4.38"]["variants"] == rows["jax"]["variants"]


def test_a_pinned_version_without_environment_passes_the_check_and_is_not_installed():
    check_frameworks(["jax==0.4.38"])  # built when a run needs it
    assert installed_version("jax==0.4.38") is None or installed_version("jax") == "0.4.38"


@requires("torch")
def test_a_pin_at_this_pythons_release_needs_no_environment():
    here = installed_version("torch")
    assert installed_version(f"torch=={here.split('+')[0]}") == here


@requires("torch")
def test_a_backend_never_measures_a_version_its_name_does_not_pin():
    from dlbench.frameworks import UnsupportedError, get_backend

    with pytest.raises(UnsupportedError, match="not 2.1.0"):
        get_backend("torch==2.1.0")


def _failing_pip(monkeypatch, line: str) -> list[list[str]]:
    """The installer faked: the venv 'succeeds', pip fails with ``line`` in its log, as pip writes it."""
    calls = []

    def run(cmd, log, what, path=None):
        calls.append(cmd)
        with open(log, "a") as f:
            f.write(f"\n$ {' '.join(cmd)}\n")
            if "pip" in cmd:
                f.write(f"Collecting something\n{line}\n")
        if "pip" in cmd:
            raise envs.EnvError(f"{what} failed (exit 1):\n{envs._error_lines(log.read_text())}")

    monkeypatch.setattr(envs, "_run", run)
    return calls


def test_a_version_pip_cannot_install_is_reported_with_pips_reason(envs_dir, monkeypatch):
    line = "ERROR: No matching distribution found for jax==99.0.0"
    calls = _failing_pip(monkeypatch, line)
    failed = ondemand.ensure_envs(["jax==99.0.0"])
    assert failed["jax==99.0.0"].startswith(f"jax==99.0.0 could not be installed: {line}")
    assert any("jax==99.0.0" in c for cmd in calls for c in cmd)
    assert not envs.env_path("jax==99.0.0").exists() and line in envs.log_path("jax==99.0.0").read_text()
    assert main(["envs", "create", "jax==99.0.0"]) == 1


@requires("torch")
def test_a_run_keeps_going_when_a_version_cannot_be_installed(envs_dir, monkeypatch, tmp_db, capsys):
    line = "ERROR: No matching distribution found for onnxruntime==99.0.0"
    _failing_pip(monkeypatch, line)
    res = api.run(db=tmp_db, models=["lenet"], frameworks=["torch", "onnxruntime==99.0.0"], scenarios=["forward"],
                  batches=[4], threads=[1], protocol={"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1,
                                                      "timeout_s": 120})
    by = {c.cell.framework: c for c in res.cells}
    assert by["torch"].cell.status == "ok"
    assert by["onnxruntime==99.0.0"].cell.status == "unsupported" and line in by["onnxruntime==99.0.0"].cell.reason
    assert res.verifications[("onnxruntime==99.0.0", "default", "lenet", "cpu", "fp32")]["verdict"] == "unsupported"
    assert not res.errors  # unsupported is not a failure: exit 0


# --- identity in tables, history, compare --baseline -------------------------------------------------
SLOW_VERSION = "torch==2.12.0"


def _versions_run(store: Store, started: float, levels: dict[str, float], seed: int) -> str:
    """One run measuring lenet forward on several versions; ``levels``: framework name -> median ms."""
    run_id = store.create_run("versions", {"name": "versions"})
    store.conn.execute("UPDATE runs SET started_at=? WHERE id=?", (started, run_id))
    store.conn.commit()
    recorded = {"torch": "2.13.0+cpu", "torch==2.11.0": "2.11.0", SLOW_VERSION: "2.12.0"}
    store.save_environment(run_id, {**ENV, "frameworks": {n: recorded[n] for n in levels}})
    for i, (name, ms) in enumerate(levels.items()):
        store.save_verification(run_id, name, "eager", "lenet", "cpu", "pass", "", {})
        store.save_cell(run_id, cell(name, "eager", "forward", 8, 1), "ok", "", 1, [], metrics(),
                        timed_samples(ms, noise=0.02, repeats=3, process_noise=0.02, seed=seed * 10 + i))
    finish(store, run_id)
    return run_id


@pytest.fixture
def version_runs(tmp_db):
    """Two runs a week apart: the first with release 2.12.0 planted 30% slower than 2.11.0 (the slowdown
    fakefw's ``slow`` variant plants); the second an identical re-run of the good releases."""
    store = Store(tmp_db)
    try:
        first = _versions_run(store, 1.7e9, {"torch==2.11.0": 5.0, SLOW_VERSION: 6.5, "torch": 5.0}, seed=1)
        second = _versions_run(store, 1.7e9 + 7 * 86400, {"torch==2.11.0": 5.0, "torch": 5.0}, seed=2)
    finally:
        store.close()
    return first, second


def test_tables_name_each_version(tmp_db, version_runs):
    res = api.results(version_runs[0], tmp_db)
    shown = [r.label for r in summary_rows(res)["lenet"]]
    assert shown == ["torch 2.11.0", "torch 2.12.0", "torch 2.13.0+cpu"]
    assert versions.labels(["jax", "keras"], {"jax": "0.10.2"}) == {"jax": "jax", "keras": "keras"}  # as before
    both = versions.labels(["jax", "jax==0.10.2"], {"jax": "0.10.2", "jax==0.10.2": "0.10.2"})
    assert len(set(both.values())) == 2


def test_compare_baseline_flags_the_slow_version_only(tmp_db, version_runs, capsys):
    first, second = version_runs
    cmps = compare_versions(api.results(first, tmp_db), "torch==2.11.0")
    verdicts = {c.run_b.split(" ")[1]: [m.verdict for m in c.matched] for c in cmps}
    assert verdicts == {SLOW_VERSION: ["slower"], "torch": ["same"]}
    assert main(["compare", first, "--baseline", "torch==2.11.0", "--fail-above", "5", "--db", str(tmp_db),
                 "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert len(out["failures"]) == 1 and out["failures"][0].startswith("torch/eager/lenet/forward/b8/t1/cpu: +")
    assert main(["compare", second, "--baseline", "torch==2.11.0", "--fail-above", "5", "--db", str(tmp_db)]) == 0
    assert main(["compare", first, "--baseline", "torch==9.9", "--db", str(tmp_db)]) == 2
    assert "has no such framework" in capsys.readouterr().err
    assert main(["compare", "--db", str(tmp_db)]) == 2  # neither two runs nor a baseline


def test_history_marks_the_slowdown_between_versions_and_not_an_identical_rerun(tmp_db, version_runs, tmp_path,
                                                                                capsys):
    store = Store(tmp_db, read_only=True)
    try:
        (series,) = history(store, "torch", "lenet", "forward")
    finally:
        store.close()
    order = [(p.label, p.run_id) for p in series.points]
    first, second = version_runs
    assert order == [("torch 2.11.0", first), ("torch 2.11.0", second), ("torch 2.12.0", first),
                     ("torch 2.13.0+cpu", first), ("torch 2.13.0+cpu", second)]
    marks = [p.change_text.split(" ")[0] for p in series.points]
    # the re-run of 2.11.0 is the same; 2.12.0 slower; 2.13.0 faster than it; its re-run the same
    assert marks == ["", "same", "slower", "faster", "same"]
    assert [p.label for p in series.flagged] == ["torch 2.12.0"]
    out = tmp_path / "hist"
    assert main(["history", "--framework", "torch", "--model", "lenet", "--scenario", "forward", "--db", str(tmp_db),
                 "--out", str(out), "--fail-on-slowdown"]) == 1
    text = capsys.readouterr().out
    assert "slower +" in text and "1 significant slowdown" in text and (out / "history-1.svg").read_text()
    assert main(["history", "--framework", "torch", "--model", "lenet", "--scenario", "forward", "--db", str(tmp_db),
                 "--json"]) == 0
    assert [p["change"] for p in json.loads(capsys.readouterr().out)[0]["points"]][1] == "same"
    assert main(["history", "--framework", "torch", "--model", "lenet", "--db", str(tmp_db)]) == 2
    assert main(["history", "--framework", "jax", "--model", "lenet", "--scenario", "forward",
                 "--db", str(tmp_db)]) == 2


def test_the_report_has_a_versions_section(tmp_db, version_runs, tmp_path):
    from dlbench.report.build import write_report

    res = api.results(version_runs[0], tmp_db)
    assert len(run_series(res)) == 1
    files = write_report(res, tmp_path / "rep", db=tmp_db)
    md = files.markdown.read_text()
    assert "## Versions" in md and "torch 2.12.0" in md and "slower +" in md
    assert any("versions-torch" in p.name for p in files.plots)


def test_a_database_from_before_versions_opens_and_joins_the_history(tmp_db, capsys):
    """A version-2 database (before versions and precisions) holding a run of the bare framework: read
    as it is, its cell is a point of the history at float32; a writing open migrates it."""
    make_v2(tmp_db)
    assert main(["history", "--framework", "torch", "--model", "lenet", "--scenario", "forward", "--db", str(tmp_db),
                 "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)
    assert len(series["points"]) == 1
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "2"  # read, not changed
    conn.close()
    Store(tmp_db).close()  # a writing open migrates it
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    conn.close()


def test_one_release_twice_in_a_run_reads_as_two_rows_and_the_terminal_names_versions_as_the_report(tmp_db,
                                                                                                  capsys):
    """Regression: the report's versions table showed two identical ``jax 0.10.2`` rows (a pinned release
    equal to the main Python's), and terminal tables printed ``torch==2.11.0`` where the report says
    ``torch 2.11.0``."""
    store = Store(tmp_db)
    try:
        run_id = store.create_run("versions", {"name": "versions"})
        store.save_environment(run_id, {**ENV, "frameworks": {"torch": "2.13.0", "torch==2.13.0": "2.13.0",
                                                              "torch==2.11.0": "2.11.0"}})
        for i, name in enumerate(("torch", "torch==2.13.0", "torch==2.11.0")):
            store.save_verification(run_id, name, "eager", "lenet", "cpu", "pass", "", {})
            store.save_cell(run_id, cell(name, "eager", "forward", 8, 1), "ok", "", 1, [], metrics(),
                            timed_samples(5.0, noise=0.02, repeats=3, seed=i))
        finish(store, run_id)
    finally:
        store.close()
    (series,) = run_series(api.results(run_id, tmp_db))
    from dlbench.report.versions import series_table

    labels = [r[0].text for r in series_table(series).rows]
    assert len(set(labels)) == 3 and "torch 2.13.0 (own environment)" in labels and "torch 2.13.0 (main Python)" in labels
    assert main(["show", run_id, "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "torch 2.11.0" in out and "torch==2.11.0" not in out


def test_the_release_lines_are_the_framework_folders_data():
    """envs/ sits below the framework folders, so each folder declares its release lines and the registry
    hands them down: the companion table holds exactly the declared ones, the pin installing the first of
    the declared distributions (TensorFlow's CPU wheel)."""
    import importlib

    from dlbench.frameworks import BUILTIN

    declared = [importlib.import_module(f"dlbench.frameworks.{folder}").DECLARATION for folder in BUILTIN]
    pinnable = {d.name: d for d in declared if d.release_lines}
    assert set(pinnable) == {"torch", "jax", "onnxruntime", "tensorflow"} <= set(companions.pinnable())
    for name, d in pinnable.items():
        assert companions.LINES[name] == d.release_lines and companions.BEFORE[name] == d.releases_before
    assert companions.DISTRIBUTION["tensorflow"] == "tensorflow-cpu"
