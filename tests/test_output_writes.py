"""Writes stay where the user told them to go (issue 41, item 2): no output follows a symbolic link
planted inside the folder it writes (``DIR/index.html -> a file``, ``DIR/runs -> a folder``), a
refusal comes before the first file is written, each file is written whole or not at all, and a link
above the named folder is followed as any tool would. Runs are written straight into a store
(tests/synthetic_runs.py): nothing here measures anything."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.measure.profile import ProfileTrace, profile_closure, write_trace
from tests.synthetic_runs import report_run
from tests.test_bad_input import one_error_line

SECRET = "precious, not ours\n"


@pytest.fixture
def world(tmp_path) -> dict:
    """A database with one run, a victim file and a victim folder outside the output folder ``out``."""
    db = tmp_path / "results.db"
    run = report_run(db)
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    folder = tmp_path / "victim-dir"
    folder.mkdir()
    (folder / "keep.txt").write_text(SECRET)
    out = tmp_path / "out"
    out.mkdir()
    return {"db": db, "run": run, "victim": victim, "folder": folder, "out": out, "tmp": tmp_path}


def listing(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (links not followed): a link as its target, a file as its text."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = ("-> " + os.readlink(path) if path.is_symlink() else "dir" if path.is_dir()
                      else path.read_bytes().decode("utf-8", "replace"))
    return found


def untouched(w: dict) -> None:
    assert w["victim"].read_text() == SECRET
    assert listing(w["folder"]) == {"keep.txt": SECRET}


def refused(argv: list[str], out: Path, capsys, says: str = "symbolic link") -> None:
    """The command exits 2 with one line naming the problem, and ``out`` is as it was."""
    before = listing(out)
    assert main(argv) == 2
    assert says in one_error_line(capsys.readouterr().err)
    assert listing(out) == before


# --- a folder the user named: a planted link is refused, nothing written --------------------------------
def test_report_refuses_a_planted_file_link(world, capsys):
    (world["out"] / "index.html").symlink_to(world["victim"])
    refused(["report", world["run"], "--db", str(world["db"]), "--out", str(world["out"])], world["out"], capsys)
    untouched(world)


def test_report_refuses_a_planted_folder_link_before_writing_any_file(world, capsys):
    (world["out"] / "plots").symlink_to(world["folder"])  # plots are written after the pages: none may be
    refused(["report", world["run"], "--db", str(world["db"]), "--out", str(world["out"])], world["out"], capsys)
    untouched(world)


@pytest.mark.parametrize("command", ["export", "compare"])
def test_a_single_output_file_that_is_a_link_is_refused(world, capsys, command):
    target = world["out"] / "result.out"
    target.symlink_to(world["victim"])
    argv = (["export", world["run"], "--out", str(target)] if command == "export"
            else ["compare", world["run"], world["run"], "--html", str(target)])
    refused([*argv, "--db", str(world["db"])], world["out"], capsys)
    untouched(world)


def test_history_plots_refuse_a_planted_link(world, capsys):
    (world["out"] / "history-1.svg").symlink_to(world["victim"])
    refused(["history", "--db", str(world["db"]), "--framework", "alpha", "--model", "lenet", "--scenario", "forward",
             "--batch", "4", "--threads", "1", "--out", str(world["out"])], world["out"], capsys)
    untouched(world)


def test_the_survey_refuses_a_planted_link_before_writing_any_file(world, capsys):
    # features.md is written late: survey.md and survey.html before it may not be
    (world["out"] / "features.md").symlink_to(world["victim"])
    refused(["survey", "--no-live", "--framework", "caffe", "--out", str(world["out"])], world["out"], capsys)
    untouched(world)


# --- the site's own folder: a planted link is replaced, its target untouched ---------------------------
def _site(world) -> list[str]:
    return ["site", str(world["out"] / "site"), "--db", str(world["db"])]


def test_the_site_replaces_links_planted_in_its_own_folder(world, capsys):
    site = world["out"] / "site"
    assert main(_site(world)) == 0
    (site / "index.html").unlink()
    (site / "index.html").symlink_to(world["victim"])
    pages = sorted(p.name for p in (site / "runs").iterdir())
    for p in (site / "runs").iterdir():
        p.unlink()
    (site / "runs").rmdir()
    (site / "runs").symlink_to(world["folder"])
    assert main(_site(world)) == 0
    untouched(world)
    assert not (site / "index.html").is_symlink() and "<html" in (site / "index.html").read_text()
    assert not (site / "runs").is_symlink() and sorted(p.name for p in (site / "runs").iterdir()) == pages
    assert not [p for p in site.rglob(".dlbench-*.tmp")]


def test_a_marker_that_is_a_link_does_not_make_a_folder_the_site_s(world, capsys):
    site = world["out"] / "site"
    site.mkdir()
    (site / ".dlbench-site").symlink_to(world["victim"])
    (site / "index.html").symlink_to(world["victim"])
    refused(_site(world), world["out"], capsys, says="did not write")
    untouched(world)


def test_the_site_refuses_a_link_to_the_database_before_writing_any_page(world, capsys):
    site = world["out"] / "site"
    assert main(_site(world)) == 0
    (site / "index.html").write_text("the old index")  # written first: it must stay as it was
    (page,) = (site / "runs").iterdir()
    page.unlink()
    page.symlink_to(world["db"])
    before = world["db"].read_bytes()
    refused(_site(world), world["out"], capsys, says="refusing to overwrite")
    assert world["db"].read_bytes() == before and (site / "index.html").read_text() == "the old index"


# a link to the database or another SQLite file, inside any output folder: tests/test_bad_input.py


# --- a link above the named folder is followed ---------------------------------------------------------
def test_a_link_above_the_named_folder_is_followed(world, capsys):
    """Not a refusal case: the guard against refusing too much (passes before and after the change)."""
    real = world["tmp"] / "real"
    real.mkdir()
    link = world["tmp"] / "link"
    link.symlink_to(real)
    db, run = str(world["db"]), world["run"]
    assert main(["report", run, "--db", db, "--out", str(link / "rep")]) == 0
    assert main(["site", str(link / "site"), "--db", db]) == 0
    assert main(["export", run, "--db", db, "--out", str(link / "cells.csv")]) == 0
    assert main(["survey", "--no-live", "--framework", "caffe", "--out", str(link / "survey")]) == 0
    assert (real / "rep" / "index.html").is_file() and (real / "site" / "index.html").is_file()
    assert (real / "cells.csv").is_file() and (real / "survey" / "survey.md").is_file()
    assert main(["report", run, "--db", db, "--out", str(link)]) == 0  # the named folder itself, a link
    assert (real / "index.html").is_file()


# --- the writer itself -----------------------------------------------------------------------------------
def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    from dlbench.core.outputs import OutputDir

    (tmp_path / "a.txt").write_text("old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(UsageError, match="No space left"):
        OutputDir(tmp_path).write({"a.txt": "new"})
    assert listing(tmp_path) == {"a.txt": "old"}


def test_a_link_planted_between_the_check_and_the_write_is_not_followed(tmp_path, monkeypatch):
    from dlbench.core.outputs import OutputDir

    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    check = OutputDir.check

    def check_then_plant(self, rels):
        paths = check(self, rels)
        out.mkdir(exist_ok=True)
        if not (out / "sub").is_symlink():
            (out / "sub").symlink_to(victim)
        (out / "f.txt").unlink(missing_ok=True)
        (out / "f.txt").symlink_to(victim / "g.txt")
        return paths

    monkeypatch.setattr(OutputDir, "check", check_then_plant)
    with pytest.raises(UsageError, match="symbolic link"):
        OutputDir(out).write({"sub/x.txt": "x"})
    with pytest.raises(UsageError, match="symbolic link"):
        OutputDir(out).write({"f.txt": "x"})
    assert list(victim.iterdir()) == []
    # in a folder that is ours, the rename replaces the link, never its target
    OutputDir(out, own=True).write({"sub/x.txt": "x", "f.txt": "y"})
    assert list(victim.iterdir()) == []
    assert not (out / "sub").is_symlink() and (out / "sub" / "x.txt").read_text() == "x"
    assert not (out / "f.txt").is_symlink() and (out / "f.txt").read_text() == "y"


def test_written_files_keep_an_existing_file_s_permissions(tmp_path):
    from dlbench.core.outputs import OutputDir

    (tmp_path / "private.csv").write_text("old")
    os.chmod(tmp_path / "private.csv", 0o600)
    OutputDir(tmp_path).write({"private.csv": "new", "fresh.csv": "x"})
    assert (tmp_path / "private.csv").stat().st_mode & 0o777 == 0o600
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "fresh.csv").stat().st_mode & 0o777 == 0o666 & ~umask


# --- files kept with a run: profiles and LoadGen's logs ------------------------------------------------
def test_a_profile_trace_is_never_written_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    outdir = tmp_path / "artifacts" / "cell" / "profile"
    outdir.mkdir(parents=True)
    (outdir / "trace.json").symlink_to(victim)
    event = {"ph": "X", "name": "op", "ts": 0.0, "dur": 1.0, "pid": 0, "tid": 0}

    def profiler(fn, calls, where: Path) -> ProfileTrace:
        for _ in range(calls):
            fn()
        return ProfileTrace(write_trace([event], where / "trace.json"), [event], "fake")

    stored = profile_closure(profiler, lambda: None, 2, outdir)
    assert victim.read_text() == SECRET
    assert stored["trace"] == "trace.json" and not (outdir / "trace.json").is_symlink()
    assert '"traceEvents"' in (outdir / "trace.json").read_text()


def test_loadgen_s_logs_are_kept_without_following_a_planted_link(tmp_path):
    from dlbench.scenarios.loadgen_harness import keep_logs

    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    tmp = tmp_path / "loadgen-tmp"
    (tmp / "floor").mkdir(parents=True)
    (tmp / "mlperf_log_summary.txt").write_text("summary")
    (tmp / "floor" / "mlperf_log_summary.txt").write_text("floor")
    cell = tmp_path / "artifacts" / "run" / "cell"
    cell.mkdir(parents=True)
    (cell / "mlperf_log_summary.txt").symlink_to(victim)
    (cell / "floor").symlink_to(tmp_path)
    kept, lost = keep_logs(str(tmp), str(cell))
    assert lost is None and kept == [str(cell / "mlperf_log_summary.txt")]
    assert victim.read_text() == SECRET and not tmp.exists()
    assert listing(cell) == {"floor": "dir", "floor/mlperf_log_summary.txt": "floor",
                             "mlperf_log_summary.txt": "summary"}


def test_a_cell_s_artifact_folders_replace_planted_links(tmp_path):
    """A resumed run finds its folder as it was left: a link planted at the run's folder, a cell's or its
    ``profile/`` is replaced by a real folder; the folder it pointed to is untouched."""
    from types import SimpleNamespace

    from dlbench.core.cell import Cell
    from dlbench.scenarios.base import make_cell_artifacts

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text(SECRET)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    ctx = SimpleNamespace(artifacts=artifacts / "run1")
    cell = Cell("torch", "eager", "lenet", "forward", 4, 1)
    ctx.artifacts.symlink_to(victim)
    made = make_cell_artifacts(cell, ctx, "profile")
    assert made == ctx.artifacts / cell.key.replace("/", "__") / "profile" and made.is_dir()
    assert not ctx.artifacts.is_symlink() and listing(victim) == {"keep.txt": SECRET}
    made.rmdir()
    made.symlink_to(victim)
    assert make_cell_artifacts(cell, ctx, "profile") == made and not made.is_symlink()
    assert listing(victim) == {"keep.txt": SECRET}


def test_dlbenchs_own_files_are_never_written_through_a_link_planted_at_their_temporary_name(tmp_path):
    """The kept caches (gate verdicts, calibration), an environment's record, a cluster's state and a rank's
    result were written as ``NAME.PID.tmp`` (or ``NAME.tmp``), a name anyone sharing the folder could
    predict, with a plain ``write_text`` that follows a link planted there: the victim was overwritten.
    Now the temporary file has a random name and is created exclusively (``core.outputs.replace_file``);
    a link at the file's own name is replaced, its target untouched."""
    from dlbench.frameworks.data_parallel import write_json
    from dlbench.measure.reuse import write_kept

    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    kept = tmp_path / "gate-verdicts.json"
    for old_name in (kept.with_name(kept.name + f".{os.getpid()}.tmp"), kept.with_suffix(".tmp"),
                     kept.with_suffix(f".{os.getpid()}.tmp")):
        old_name.symlink_to(victim)
    write_kept(kept, {"k": {"verdict": "pass"}})
    write_json(kept, {"rank": 0})
    assert victim.read_text() == SECRET and kept.is_file() and not kept.is_symlink()
    from dlbench.core.outputs import replace_file

    linked = tmp_path / "dlbench-env.json"
    linked.symlink_to(victim)
    replace_file(linked, "{}")
    assert victim.read_text() == SECRET and linked.read_text() == "{}" and not linked.is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
