"""A LoadGen cell whose artifact directory cannot be written warns and goes on, as ``--profile`` does
(issue #31, defect 1): it used to abort the whole run (``internal error: NotADirectoryError``, the run
left interrupted)."""

import os

import pytest

from dlbench import api
from tests.conftest import requires

SHORT = {"min_duration_s": 0.3, "min_queries": 20}


def _artifacts_file(db):
    (db.parent / "artifacts").write_text("not a directory\n")


def _artifacts_dangling_symlink(db):
    (db.parent / "artifacts").symlink_to(db.parent / "no-such-place" / "artifacts")


def _artifacts_symlink_to_a_file(db):
    target = db.parent / "elsewhere.txt"
    target.write_text("x")
    (db.parent / "artifacts").symlink_to(target)


def _artifacts_read_only(db):
    (db.parent / "artifacts").mkdir()
    os.chmod(db.parent / "artifacts", 0o555)


@requires("mlperf_loadgen")
@pytest.mark.parametrize("make", [_artifacts_file, _artifacts_dangling_symlink, _artifacts_symlink_to_a_file,
                                  _artifacts_read_only], ids=lambda f: f.__name__.removeprefix("_artifacts_"))
def test_an_unwritable_artifacts_directory_warns_and_the_run_completes(fake_framework, tmp_db, make, monkeypatch):
    make(tmp_db)
    if make is _artifacts_read_only and os.access(tmp_db.parent / "artifacts", os.W_OK):
        # root: a mode does not stop its writes; the directory reads as unwritable, as it would to anyone else
        from dlbench.scenarios import loadgen_harness

        real = os.access
        def access(path, mode, *args, **kwargs):
            return not str(path).startswith(str(tmp_db.parent / "artifacts")) and real(path, mode, *args, **kwargs)

        monkeypatch.setattr(loadgen_harness.os, "access", access)
    try:
        res = api.run(models=["lenet"], frameworks=["fakefw"], scenarios=["loadgen-offline"], threads=[1],
                      protocol={"repeats": 1, "warmup": 2}, db=tmp_db, serving=SHORT)
    finally:
        if (tmp_db.parent / "artifacts").is_dir():
            os.chmod(tmp_db.parent / "artifacts", 0o755)
    (cell,) = res.cells
    assert res.run["status"] == "complete"
    assert cell.cell.status == "ok", cell.cell.reason
    assert any("LoadGen's log files are not kept" in w for w in cell.cell.warnings), cell.cell.warnings
    assert cell.cell.metrics["loadgen"]["summary"] and cell.cell.metrics["loadgen"]["logs"] == []
