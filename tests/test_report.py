"""`dlbench report`: the three files, the tables (best in bold, failures footnoted), escaping, plots."""

import csv
import html
import json
import re
from pathlib import Path

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.report.build import write_report
from dlbench.report.markdown import md
from dlbench.report.tables import build_content, fmt_num
from dlbench.storage.store import Store
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

    code = "import dlbench.cli, dlbench.cli.report, dlbench.report.build, sys; print('matplotlib' in sys.modules)"
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


def _generate_run(db: Path, *levels: tuple[float, ...]) -> str:
    from tests.synthetic_runs import generate_cell

    store = Store(db)
    run_id = new_run(store, peaks={1: 50.0})
    for fw, lv in zip(("alpha", "beta"), levels, strict=False):
        generate_cell(store, run_id, lv, framework=fw)
    finish(store, run_id)
    store.close()
    return run_id


@pytest.fixture
def wide(monkeypatch):
    """The terminal's tables unwrapped, so a cell's text is read whole."""
    from dlbench.cli.common import console

    monkeypatch.setattr(console, "width", 1000)


def test_a_generate_cells_figures_are_in_every_json_output_and_the_export(tmp_db, capsys, wide):
    """TTFT, TPOT and tokens/s, which the summary's column shows, are in ``show --json`` (as in ``run
    --json``), in ``export --format json`` and in the CSV, from the scenario's analysis of the samples."""
    _generate_run(tmp_db, (10.0, 10.1, 9.9))
    assert main(["show", "--db", str(tmp_db)]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"TTFT (9\.9|10)[0-9.]* \[[0-9.]+, [0-9.]+\] ms, TPOT", shown)
    assert main(["show", "--json", "--db", str(tmp_db)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]["gpt2"]
    assert row["generate_ttft_ms"]["median"] == pytest.approx(10.0, rel=0.05)
    assert row["generate_tpot_ms"]["median"] == pytest.approx(1.0, rel=0.05)
    per_seq = 4 / (10.0 * 1.3 / 1e3)  # 4 new tokens in a TTFT and 3 tokens of a tenth of it
    assert row["generate_tokens_per_s_total"]["median"] == pytest.approx(per_seq, rel=0.05)
    assert row["generate_ttft_ms"]["ci_low"] < row["generate_ttft_ms"]["median"] < row["generate_ttft_ms"]["ci_high"]
    assert main(["export", "--format", "json", "--db", str(tmp_db)]) == 0
    (c,) = json.loads(capsys.readouterr().out)["cells"]
    assert set(c["figures"]) == {"ttft_ms", "tpot_ms", "tokens_per_s_sequence", "tokens_per_s_total"}
    assert c["figures"]["ttft_ms"]["median"] == row["generate_ttft_ms"]["median"]
    assert len(c["figures"]["ttft_ms"]["processes"]) == 3 and not c["figures"]["ttft_ms"]["processes_disagree"]
    assert main(["export", "--db", str(tmp_db)]) == 0
    (r,) = csv.DictReader(capsys.readouterr().out.splitlines())
    assert float(r["ttft_ms_median"]) == pytest.approx(c["figures"]["ttft_ms"]["median"])
    assert float(r["tokens_per_s_total_median"]) == pytest.approx(per_seq, rel=0.05)
    assert r["ttft_ms_processes_disagree"] == "False" and len(r["ttft_ms_process_medians"].split(";")) == 3


def test_a_generate_cells_cold_start_is_stored_and_shown_in_show_its_json_and_the_report(tmp_db, tmp_path, capsys,
                                                                                          wide):
    """The seconds to convert and load a runtime's model and the first generation's TTFT, each a fresh
    process's, are figures of the cell: medians over the processes in show's generation table, in
    ``show --json``'s ``generation`` rows with each process's own, and in the report's cold-start table; a
    decoder that reports no conversion shows a dash."""
    from tests.synthetic_runs import generate_cell

    store = Store(tmp_db)
    run_id = new_run(store, peaks={1: 50.0})
    generate_cell(store, run_id, (10.0, 12.0, 11.0), framework="alpha", convert_s=3.0)
    generate_cell(store, run_id, (10.0, 10.1, 9.9), framework="beta")
    finish(store, run_id)
    store.close()
    assert main(["show", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    shown = {line.split("│")[2].strip(): [v.strip() for v in line.split("│")] for line in out.splitlines()
             if "/eager" in line and line.count("│") > 10}
    assert shown["alpha/eager"][-5:-1] == ["3.00", "0.300", "22.0", "0"]  # convert s, load s, first TTFT ms, ties
    assert shown["beta/eager"][-5:-1] == ["–", "–", "20.0", "0"]
    assert main(["show", "--json", "--db", str(tmp_db)]) == 0
    rows = {r["framework"]: r for r in json.loads(capsys.readouterr().out)["generation"]}
    cold = rows["alpha"]["cold_start"]
    assert (cold["convert_s"], cold["load_s"], cold["cold_ttft_s"]) == pytest.approx((3.0, 0.3, 0.022))
    assert [p["cold_ttft_s"] for p in cold["processes"]] == pytest.approx([0.02, 0.024, 0.022])
    assert rows["beta"]["cold_start"]["convert_s"] is None and rows["beta"]["cold_start"]["build_s"] == 1e-3
    assert rows["alpha"]["ttft_ms"]["median"] == pytest.approx(11.0, rel=0.05)
    text = write_report(api.results(run_id, tmp_db), tmp_path / "out").markdown.read_text()
    table = text.split("gpt2: cold start, medians over fresh processes")[1].split("\n\n")[1]
    assert "first TTFT ms" in table and "3.00" in table and "22.0" in table, table


def test_processes_that_disagree_are_shown_as_such_in_every_view(tmp_db, tmp_path, capsys, wide):
    """Two processes, one ten times the other (one ran beside other load): the t interval of one degree
    of freedom spans orders of magnitude. The summary, the generation table, the report, the JSON and
    the cost table show each process's median and "processes disagree" with the flags that measure
    more, never that interval; a cell whose processes agree keeps its interval."""
    run_id = _generate_run(tmp_db, (10.0, 100.0), (10.0, 10.2, 9.9))
    res = api.results(run_id, tmp_db)
    bad, good = (next(c for c in res.cells if c.cell.framework == fw) for fw in ("alpha", "beta"))
    assert bad.figures["ttft_ms"].ci_high / bad.figures["ttft_ms"].ci_low > 1e6  # the interval says nothing
    assert main(["show", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"TTFT processes disagree: (9\.9|10)[0-9.]* / (99|100)[0-9.]* ms per process \(measure more "
                     r"processes: --repeats 6, or --target-ci 10\), TPOT processes disagree", out), out
    assert "e+0" not in out and "[0.0" not in out
    assert main(["show", "--json", "--db", str(tmp_db)]) == 0
    rows = {r["framework"]: r for r in json.loads(capsys.readouterr().out)["models"]["gpt2"]}
    ttft = rows["alpha"]["generate_ttft_ms"]
    assert ttft["processes_disagree"] and ttft["processes"] == pytest.approx([10.0, 100.0], rel=0.05)
    assert "--repeats 6" in ttft["measure_more"] and rows["alpha"]["generate_tpot_ms"]["processes_disagree"]
    agree = rows["beta"]["generate_ttft_ms"]
    assert not agree["processes_disagree"] and agree["measure_more"] is None
    assert main(["show", "--cost", "--db", str(tmp_db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "processes disagree" in out and "%" in out  # the agreeing cell keeps its ±
    assert main(["show", "--cost", "--json", "--db", str(tmp_db)]) == 0
    costs = {r["key"].split("/")[0]: r for r in json.loads(capsys.readouterr().out)["cells"]}
    assert costs["alpha"]["half_width"] is None and costs["alpha"]["processes_disagree"]["medians_ms"]
    assert costs["beta"]["half_width"] is not None and costs["beta"]["processes_disagree"] is None
    text = " ".join(write_report(res, tmp_path / "out").markdown.read_text().split())
    assert re.search(r"processes disagree: (9\.9|10)[0-9.]* / (99|100)[0-9.]* per process", text) and "--repeats 6" in text
    assert "processes disagree" in text.split("Cost and precision")[1]


def test_a_per_batch_cell_whose_processes_disagree_shows_them_in_the_summary_report_and_export(tmp_db, tmp_path,
                                                                                            capsys, wide):
    """A forward cell of two processes at 5 and 50 ms: its column, the report's table and the CSV give
    both medians and the verdict, not an interval of one degree of freedom."""
    from dlbench.storage.store import Sample

    store = Store(tmp_db)
    run_id = new_run(store, peaks={1: 50.0})
    verify_pass(store, run_id, "alpha", "eager")
    samples = [Sample(r, i, "measure", ms * (1 + 0.001 * i) * 1e6) for r, ms in enumerate((5.0, 50.0)) for i in range(20)]
    store.save_cell(run_id, cell("alpha", "eager", "forward", 4, 1), "ok", "", 1.0, [], metrics(), samples)
    finish(store, run_id)
    store.close()
    assert main(["show", "--db", str(tmp_db)]) == 0
    assert re.search(r"processes disagree: 5\.0[0-9]* / 50\.[0-9]* per process \(measure more processes: --repeats 6",
                     capsys.readouterr().out)
    res = api.results(run_id, tmp_db)
    text = write_report(res, tmp_path / "out").markdown.read_text()
    assert re.search(r"processes disagree: 5\.0[0-9]* / 50\.[0-9]* per process", text)
    from dlbench.report.site import run_html

    assert re.search(r"processes disagree: 5\.0[0-9]* / 50\.[0-9]* per process", run_html(res))  # the site's run page
    from dlbench.report.versions import Point, Series, series_table

    (c,) = res.cells
    table = series_table(Series("alpha", "lenet", "forward", 4, 1, "cpu", "eager",
                                points=[Point(run_id, 0.0, "h", "alpha", "1.0", c)]))
    (value,) = [v for v in table.rows[0] if "processes disagree" in v.text]  # the versions table
    assert value.number is None
    assert main(["export", "--db", str(tmp_db)]) == 0
    (row,) = csv.DictReader(capsys.readouterr().out.splitlines())
    assert row["processes_disagree"] == "True" and [round(float(v)) for v in row["process_medians_ms"].split(";")] == [5, 50]
