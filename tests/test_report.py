"""`dlbench report`: the three files, the tables (best in bold, failures footnoted), escaping, plots."""

import csv
import html
import json
import re
from pathlib import Path

import pytest

from dlbench import api
from dlbench.cli import main
from dlbench.report.build import write_report
from dlbench.report.markdown import md
from dlbench.report.tables import build_content, fmt_num
from dlbench.store import Store
from tests.conftest import requires
from tests.synthetic_runs import cell, finish, metrics, new_run, report_run, timed_samples, verify_pass

pytestmark = requires("matplotlib")
INJECTION = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report, written once for the module (drawing plots takes seconds on a busy machine)."""
    tmp = tmp_path_factory.mktemp("report")
    run_id = report_run(tmp / "r.db")
    res = api.results(run_id, tmp / "r.db")
    return res, write_report(res, tmp / "out")


def one_cell_run(db: Path) -> str:
    """One framework, one batch, one thread count: every plot but the iterations lacks its axis."""
    store = Store(db)
    run_id = new_run(store, peaks={1: 50.0})
    verify_pass(store, run_id, "alpha", "eager")
    store.save_cell(run_id, cell("alpha", "eager", "forward", 4, 1), "ok", "", 1.0, [], metrics(), timed_samples(5.0))
    finish(store, run_id)
    store.close()
    return run_id


def test_writes_three_files_and_plots(report):
    res, files = report
    assert files.html.name == "index.html" and files.markdown.name == "report.md" and files.csv.name == "cells.csv"
    page = files.html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    # self-contained: no link, script or remote resource of any kind; plots are data: images
    assert not re.search(r"<(script|link|iframe)\b", page)
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page)
    assert "Content-Security-Policy" in page
    assert page.count('<img src="data:image/svg+xml;base64,') == len(files.plots) == 4
    rows = list(csv.DictReader(files.csv.open()))
    assert len(rows) == len(res.cells) and rows[0]["key"] == res.cells[0].cell.key
    assert {p.name for p in files.plots} == {"time-vs-batch-lenet.svg", "time-vs-threads-lenet.svg",
                                              "memory-vs-batch-lenet.svg", "iterations-lenet.svg"}
    text = files.markdown.read_text()
    assert "plots/time-vs-batch-lenet.svg" in text and "## Environment" in text and "## Warnings" in text


def test_environment_peaks_and_warnings_shown(report):
    _, files = report
    page = files.html.read_text()
    for expected in ("testbox", "Linux-test", "2 usable", "framework torch", "2.13.0", "numpy GFLOP/s", "100",
                     "noisy: std is 12% of the mean", "beta/eager/lenet/forward/b8/t2/cpu"):
        assert expected in page, expected


def test_best_value_is_bold_within_comparable_rows(report):
    res, _ = report
    (table,) = build_content(res).tables
    col = {c.key: j for j, c in enumerate(table.columns)}
    by_row = {(r[0].text, r[3].text, r[4].text): r for r in table.rows}  # framework, threads, batch
    for threads in ("1", "2"):
        for batch in ("4", "8"):
            alpha, beta = by_row[("alpha", threads, batch)], by_row[("beta", threads, batch)]
            # alpha is twice as fast and uses less memory; beta compiles faster
            assert alpha[col["forward"]].best and not beta[col["forward"]].best
            assert alpha[col["train_step"]].best and not beta[col["train_step"]].best
            assert alpha[col["samples_per_s"]].best and not beta[col["samples_per_s"]].best
            assert alpha[col["memory"]].best and not beta[col["memory"]].best
    assert by_row[("beta", "1", "4")][col["compile"]].best
    assert not by_row[("alpha", "1", "4")][col["compile"]].best
    # rendered: bold in both formats
    _, files = report
    alpha_fwd = by_row[("alpha", "1", "4")][col["forward"]].text
    assert f"<strong>{alpha_fwd}</strong>" in files.html.read_text()
    assert f"**{alpha_fwd}**" in files.markdown.read_text()


def test_failed_cells_are_dashes_with_a_footnote(report):
    res, files = report
    content = build_content(res)
    (table,) = content.tables
    gamma = next(r for r in table.rows if r[0].text == "gamma")
    col = {c.key: j for j, c in enumerate(table.columns)}
    failed, unsupported = gamma[col["forward"]], gamma[col["train_step"]]
    assert failed.text == unsupported.text == "–"
    notes = {n.number: n.text for n in content.footnotes}
    assert notes[failed.note] == f"failed: {INJECTION}"
    assert notes[unsupported.note] == "unsupported: gamma cannot train | not at all"
    page = files.html.read_text()
    assert f'href="#note-{failed.note}"' in page and f'id="note-{failed.note}"' in page
    text = files.markdown.read_text()
    assert f"[^{failed.note}]: failed:" in text and f"–[^{unsupported.note}]" in text


def test_reason_is_shown_as_text_never_as_markup(report):
    _, files = report
    page = files.html.read_text()
    assert INJECTION not in page
    assert html.escape(INJECTION) in page
    assert "Test CPU &lt;b&gt;9000&lt;/b&gt;" in page  # environment strings too
    text = files.markdown.read_text()
    assert INJECTION not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "gamma cannot train \\| not at all" in text  # a pipe cannot split a Markdown table cell


def test_markdown_escaping():
    assert md("a|b") == "a\\|b"
    assert md("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert md("*bold* [link](x)\nnext") == "\\*bold\\* \\[link\\](x) next"


def test_number_format():
    assert [fmt_num(x) for x in (43152.0, 545.6, 12.34, 1.234, 0.01234, 0.0)] == \
        ["43,152", "546", "12.3", "1.23", "0.0123", "0"]
    assert fmt_num(None) == "–"


def test_plots_need_their_axis_and_say_why_not(tmp_path):
    db = tmp_path / "one.db"
    run_id = one_cell_run(db)
    files = write_report(api.results(run_id, db), tmp_path / "out")
    assert [p.name for p in files.plots] == ["iterations-lenet.svg"]
    reasons = {s.title: s.reason for s in files.skipped}
    assert "this run has lenet: batch 4" in reasons["time vs batch size"]
    assert "this run has lenet: threads 1" in reasons["time vs CPU threads"]
    assert "peak memory vs batch size" in reasons
    page = files.html.read_text()
    assert "Plots not drawn" in page and "this run has lenet: threads 1" in page


def test_cli_report_latest_run_default_dir(tmp_path, monkeypatch, capsys):
    db = tmp_path / "r.db"
    one_cell_run(db)
    run_id = one_cell_run(db)  # the latest
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_id"] == run_id
    assert Path(out["html"]) == Path("dlbench-results") / f"report-{run_id}" / "index.html"
    assert (tmp_path / out["html"]).is_file() and (tmp_path / out["csv"]).is_file()
    assert main(["report", run_id, "--out", str(tmp_path / "elsewhere"), "--db", str(db)]) == 0
    assert (tmp_path / "elsewhere" / "report.md").is_file()
    assert main(["report", "nosuchrun", "--db", str(db)]) == 2


def test_matplotlib_is_imported_lazily():
    import subprocess
    import sys

    code = "import dlbench.cli, dlbench.cli_report, dlbench.report.build, sys; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.stdout.strip() == "False"


def test_without_matplotlib_the_report_has_no_plots_and_says_why(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    db = tmp_path / "r.db"
    files = write_report(api.results(one_cell_run(db), db), tmp_path / "out")
    assert files.plots == [] and "matplotlib is not installed" in files.html.read_text()


def test_report_with_the_survey_section(tmp_path, capsys):
    """`dlbench report --survey DIR` puts the survey's tables into index.html and report.md."""
    db = tmp_path / "r.db"
    run_id = one_cell_run(db)
    assert main(["survey", "--no-live", "--framework", "caffe,theano", "--out", str(tmp_path / "s")]) == 0
    page = (tmp_path / "s" / "survey.html").read_text()
    assert "Feature matrix" in page and "Core language" in page and "<script" not in page
    assert main(["report", run_id, "--db", str(db), "--out", str(tmp_path / "rep"), "--survey", str(tmp_path / "s")]) == 0
    index = (tmp_path / "rep" / "index.html").read_text()
    assert "<h2>Survey</h2>" in index and "Core language" in index and "API coverage" in index
    assert index.index("<h2>Survey</h2>") > index.index("<h2>Results</h2>")
    assert "## Survey" in (tmp_path / "rep" / "report.md").read_text()
    capsys.readouterr()
    assert main(["report", run_id, "--db", str(db), "--out", str(tmp_path / "x"), "--survey", str(tmp_path)]) == 2
    assert "cannot read survey" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"a": 1}')
    bad = str(tmp_path / "bad.json")
    assert main(["report", run_id, "--db", str(db), "--out", str(tmp_path / "x"), "--survey", bad]) == 2
    assert "is not a dlbench survey" in capsys.readouterr().err


def test_the_gate_s_failures_are_not_mixed_with_what_a_framework_cannot_run(tmp_db, tmp_path):
    """Regression: "Equivalence gate: not passed" listed cells that were only unsupported (ONNX Runtime
    cannot train): a reader took them for failures of the gate."""
    store = Store(tmp_db)
    try:
        run_id = new_run(store)
        verify_pass(store, run_id, "alpha", "eager")
        store.save_verification(run_id, "beta", "eager", "lenet", "cpu", "unsupported", "beta cannot train", {})
        store.save_verification(run_id, "gamma", "eager", "lenet", "cpu", "fail", "forward error 1e-2 > 1e-4", {})
        store.save_cell(run_id, cell("alpha", "eager", "forward", 4, 1), "ok", "", 1.0, [], metrics(),
                        timed_samples(5.0))
        finish(store, run_id)
    finally:
        store.close()
    content = build_content(api.results(run_id, tmp_db))
    assert [k for k, _ in content.verification] == ["gamma/eager/lenet/cpu"]
    assert content.unsupported == [("beta/eager/lenet/cpu", "beta cannot train")]
    md_text = write_report(api.results(run_id, tmp_db), tmp_path / "rep", db=tmp_db).markdown.read_text()
    failed = md_text.split("### Equivalence gate: not passed")[1].split("###")[0]
    assert "gamma" in failed and "beta" not in failed
    assert "### Not gated: unsupported by the framework" in md_text
