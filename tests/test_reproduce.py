"""`dlbench reproduce`: the transcribed tables, the plan (successors, threads, devices), and a quick
run of Bahrampour et al.'s Table 3 on torch."""

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.engines import reproduce as rep
from dlbench.models import get_model
from tests.conftest import requires

TARGETS = ["bahrampour2016-table3", "bahrampour2016-table4", "bahrampour2016-table5", "bahrampour2016-table6",
           "bahrampour2016-table7", "shi2016-table7", "shi2016-table8", "liu2018-fig3", "liu2018-fig4"]


def env(cores=2, gpu=False, gpu_device="cuda", only=()):
    return rep.Environment(cores=cores, has_gpu=gpu, backends={"torch": "2.13.0", "tensorflow": None},
                           gpu_device=gpu_device, only=only)


def test_every_target_is_listed(capsys):
    assert list(rep.targets()) == TARGETS
    assert main(["reproduce", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["target"] for t in listed] == TARGETS
    assert {t["target"]: t["values_printed"] for t in listed}["liu2018-fig3"] is False
    assert main(["reproduce", "--list"]) == 0
    assert "bahrampour2016-table3" in capsys.readouterr().out


def test_transcriptions_are_well_formed():
    for name, t in rep.targets().items():
        paper = rep.paper_of(name)
        assert paper["hardware"]["summary"] and paper["cite"] and t["section"] and t["caption"]
        for r in t["rows"]:
            assert r["framework"] in rep.lineages(), r
            if t.get("printed", True):
                assert len(r["values"]) == len(t["columns"]), (name, r)
                for v in r["values"]:
                    assert isinstance(v, str) and (v == "-" or rep.parse_published(v) is not None), (name, v)
            else:
                assert "values" not in r and t["not_printed"]
        models = {c.get("model") for c in t["columns"]} | {r.get("model") for r in t["rows"]} | \
            {t.get("defaults", {}).get("model")} | set(t.get("batch_by_model", {})) | set(t.get("batches_by_model", {}))
        for m in models - {None}:
            get_model(m)  # every model reference exists


@pytest.mark.parametrize("target, row, column, printed", [
    ("bahrampour2016-table3", 0, 0, "545.6"),  # Neon, 1 thread, gradient
    ("bahrampour2016-table3", 7, 1, "4.6"),  # Torch, 12 threads, forward
    ("bahrampour2016-table4", 1, 0, "100987"),  # Neon (1 thread)*†
    ("bahrampour2016-table5", 5, 3, "30.9"),  # Caffe, 12 threads, total pre-training
    ("bahrampour2016-table6", 1, 1, "54.8"),
    ("bahrampour2016-table7", 2, 0, "22.9"),
    ("shi2016-table7", 0, 3, "15.444"),  # FCN-S Caffe, desktop 8 threads
    ("shi2016-table7", 13, 0, "48.000"),  # ResNet-50 MXNet, printed with trailing zeros
    ("shi2016-table7", 34, 12, "0.560"),  # LSTM Torch, K80
    ("shi2016-table8", 14, 2, "0.096"),
])
def test_spot_check_transcription(target, row, column, printed):
    assert rep.targets()[target]["rows"][row]["values"][column] == printed


def test_successors():
    backends = {"torch": "2.13.0", "tensorflow": "2.20.0", "pytensor": "3.0.7", "chainer": None, "mxnet": None}
    m = {name: rep.map_framework(name, backends) for name in rep.lineages()}
    assert (m["Torch"].ours, m["Torch"].relation) == ("torch", "successor") and m["Caffe"].ours == "torch"
    assert (m["Theano"].ours, m["Theano"].relation) == ("pytensor", "successor")
    assert (m["TensorFlow"].ours, m["TensorFlow"].relation) == ("tensorflow", "itself")
    assert m["Neon"].ours is None and m["CNTK"].ours is None and m["Neon"].text == "Neon->none"
    # MXNet has no successor: itself, skipped with how to install it
    assert (m["MXNet"].ours, m["MXNet"].relation) == ("mxnet", "itself")
    skip = next(s.skip for s in rep.plan("shi2016-table7", rep.Environment(2, False, backends))
                if s.paper_framework == "MXNet")
    assert "mxnet is not installed (dlbench envs create mxnet)" in skip


def test_chainer_is_itself_where_it_runs_here():
    """Issue 15: Liu et al.'s Chainer mapped to torch although Chainer runs here in its own environment."""
    with_env = {"torch": "2.13.0", "chainer": "7.8.1"}
    m = rep.map_framework("Chainer", with_env)
    assert (m.ours, m.relation, m.text) == ("chainer", "itself", "Chainer->chainer (itself)")
    settings = [s for s in rep.plan("liu2018-fig3", rep.Environment(2, False, with_env)) if s.paper_framework == "Chainer"]
    assert settings and {(s.framework, s.relation) for s in settings} == {("chainer", "itself")}
    lines = rep.compare_lines(settings, None)
    assert {line.mapping for line in lines} == {"Chainer -> chainer/default (itself)"}
    # without its environment: its successor, saying why
    m = rep.map_framework("Chainer", {"torch": "2.13.0", "chainer": None})
    assert (m.ours, m.relation) == ("torch", "successor") and "dlbench envs create chainer" in m.why


def test_list_says_itself_or_successor(monkeypatch, capsys):
    monkeypatch.setattr(rep, "installed_backends", lambda: {"torch": "2.13.0", "chainer": "7.8.1", "tensorflow": None})
    assert main(["reproduce", "--list", "--json"]) == 0
    listed = {t["target"]: t["frameworks"] for t in json.loads(capsys.readouterr().out)}
    assert {"paper": "Chainer", "ours": "chainer", "relation": "itself"} in listed["liu2018-fig3"]
    assert {"paper": "Caffe2", "ours": "torch", "relation": "successor"} in listed["liu2018-fig3"]
    assert main(["reproduce", "--list"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "Chainer->chainer (itself)" in text and "Caffe2->torch (successor)" in text


def test_plan_maps_frameworks_threads_and_devices():
    settings = rep.plan("bahrampour2016-table3", env(cores=2))
    by = {(s.row, s.paper_threads, s.paper_device, s.column): s for s in settings}
    torch12 = by[("Torch", 12, "cpu", "Gradient (ms)")]
    assert torch12.framework == "torch" and torch12.threads == 2 and not torch12.skip  # 12 threads -> all 2 cores
    assert by[("Torch", 1, "cpu", "Forward (ms)")].threads == 1
    assert by[("Caffe", 12, "cpu", "Forward (ms)")].framework == "torch"
    assert "nothing continues it" in by[("Neon", 1, "cpu", "Gradient (ms)")].skip
    assert "no pytensor backend" in by[("Theano", 6, "cpu", "Gradient (ms)")].skip
    assert "no NVIDIA GPU" in by[("Torch + cuDNN", None, "gpu", "Gradient (ms)")].skip
    # a big machine keeps the paper's thread counts
    big = {(s.row, s.paper_threads): s.threads for s in rep.plan("bahrampour2016-table3", env(cores=64))}
    assert big[("Torch", 6)] == 6 and big[("Torch", 12)] == 12
    # GPU rows: on a GPU machine on cuda; or on the CPU when asked
    gpu = [s for s in rep.plan("bahrampour2016-table3", env(gpu=True)) if s.row == "Torch + cuDNN"]
    assert len(gpu) == 2 and all(s.device == "cuda" and not s.skip for s in gpu)
    on_cpu = [s for s in rep.plan("bahrampour2016-table3", env(gpu_device="cpu")) if s.row == "Torch + cuDNN"]
    assert len(on_cpu) == 2 and all(s.device == "cpu" and s.threads == 2 and not s.skip for s in on_cpu)


def test_plan_multi_gpu_missing_backend_and_selection():
    settings = rep.plan("shi2016-table8", env(gpu=True))
    torch = [s for s in settings if s.paper_framework == "Torch"]
    assert {s.column: bool(s.skip) for s in torch[:3]} == {"1 GK210": False, "2 GK210": True, "4 GK210": True}
    assert "data parallel" in torch[1].skip
    tf = next(s for s in settings if s.paper_framework == "TensorFlow")
    assert "tensorflow is not installed" in tf.skip
    only = rep.plan("bahrampour2016-table3", env(only=("tensorflow",)))
    # every setting kept, each with why it is skipped (all() of an empty plan passed)
    assert len(only) == len(rep.plan("bahrampour2016-table3", env())) == 30 and all(s.skip for s in only)


def test_sums_and_batches():
    settings = rep.plan("bahrampour2016-table5", env())
    total = next(s for s in settings if s.row == "Torch" and s.column.startswith("Gradient total"))
    assert [settings[i].model for i in total.sum_of] == ["sae:phase=pretrain1", "sae:phase=pretrain2",
                                                         "sae:phase=pretrain3"]
    shi = rep.plan("shi2016-table7", env())
    assert {s.model: s.batch for s in shi} == {"fcn-s": 64, "alexnet-s": 16, "resnet-50": 16, "fcn-r": 1024,
                                               "alexnet-r": 1024, "resnet-56": 128, "lstm-ptb": 128}
    liu = rep.plan("liu2018-fig3", env())
    assert all(s.published is None for s in liu)
    assert sorted({(s.model, s.batch) for s in liu}) == [("resnet-50", 8), ("resnet-50", 16), ("resnet-50", 32),
                                                         ("resnet-50-cifar", 32), ("resnet-50-cifar", 64),
                                                         ("resnet-50-cifar", 128), ("resnet-50-cifar", 256)]


@requires("torch")
@pytest.mark.usefixtures("whole_machine")  # the paper's 12 threads become this machine's 2 cores
def test_suite_holds_exactly_the_needed_cells():
    from dlbench.running.runner import plan_cells

    settings = rep.plan("bahrampour2016-table4", env(cores=2))
    suite = rep.suite_for("bahrampour2016-table4", settings, rep.QUICK)
    _, cells = plan_cells(suite)
    got = {(c.framework, c.model, c.scenario, c.batch, c.threads, c.device) for c in cells}
    # Caffe (12 threads, full AlexNet) and Torch (6 and 12 threads, no LRN) -> torch on 2 threads
    assert got == {("torch", m, s, 256, 2, "cpu") for m in ("alexnet", "alexnet:lrn=0") for s in ("gradient", "forward")}


def test_lines_without_a_run_say_why():
    settings = rep.plan("liu2018-fig4", env())
    lines = rep.compare_lines(settings, None)
    assert len(lines) == len(settings) == 35  # a line for every setting (all() of none passed)
    assert all(line.published == "not printed" and line.ours is None and line.ratio is None for line in lines)
    assert all("no NVIDIA GPU" in line.note or "nothing continues it" in line.note or "not installed" in line.note
               or "no mxnet backend" in line.note for line in lines)


def test_dry_run_and_bad_target(capsys, tmp_path):
    assert main(["reproduce", "shi2016-table7", "--dry-run", "--db", str(tmp_path / "r.db")]) == 0
    out = capsys.readouterr().out
    assert "15.444" in out and "CNTK -> none" in out and "i7-3820" in out and "our machine" in out
    assert not (tmp_path / "r.db").exists()
    assert main(["reproduce", "nosuch-table"]) == 2
    assert main(["reproduce"]) == 2


@requires("torch")
@pytest.mark.usefixtures("whole_machine")
def test_quick_reproduce_bahrampour_table3_on_torch(tmp_db, capsys):
    code = main(["reproduce", "bahrampour2016-table3", "--quick", "--framework", "torch", "--db", str(tmp_db),
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["paper_hardware"]["cpu"].startswith("Intel Xeon CPU E5-1650 v2") and data["ours_hardware"]
    assert {m["paper"]: m["ours"] for m in data["mapping"]} == {"Neon": "none", "Theano": "pytensor",
                                                                "Torch": "torch", "Caffe": "torch"}
    lines = {(line["row"], line["threads"], line["column"]): line for line in data["lines"]}
    torch1 = lines[("Torch", "1 -> 1", "Gradient (ms)")]
    assert torch1["published"] == "46.1" and torch1["ours"] > 0 and torch1["ratio"] == torch1["ours"] / 46.1
    assert torch1["ours_low"] <= torch1["ours"] <= torch1["ours_high"]
    assert lines[("Caffe", "12 -> 2", "Forward (ms)")]["ours"] > 0
    assert lines[("Neon", "1", "Gradient (ms)")]["note"].startswith("not reproduced: Neon")
    assert data["run_id"]
    # the reproduction is an ordinary stored run: it can be reported
    assert main(["report", data["run_id"], "--db", str(tmp_db), "--out", str(tmp_db.parent / "rep")]) == 0


PAPERS = Path(os.environ.get("DLBENCH_PAPERS", "/work/shared/papers"))


@pytest.mark.skipif(not PAPERS.is_dir(), reason=f"the paper texts are not at {PAPERS} (set DLBENCH_PAPERS)")
def test_transcriptions_match_the_paper_texts():
    """Every printed row of a table whose layout survived the text extraction appears in the text as
    one tab-separated run of values; for Bahrampour Tables 5 and 7 (layout lost) the numbers of the
    table's text block are exactly ours (Table 7's block also holds its section number 6.5 and the
    stacked duplicate 23.2)."""
    for name, t in rep.targets().items():
        if not t.get("printed", True):
            continue
        text = (PAPERS / rep.paper_of(name)["text"]).read_text()
        if name in ("bahrampour2016-table5", "bahrampour2016-table7"):
            continue
        for r in t["rows"]:
            assert "\t".join(r["values"]) in text, (name, r["setting"])
    text = (PAPERS / rep.paper_of("bahrampour2016-table5")["text"]).read_text()
    blocks = {"bahrampour2016-table5": text[text.index("\t\t\tGradient (ms)"):text.index("Table 5:")],
              "bahrampour2016-table7": text[text.index("6.5 SUPPLEMENTAL"):text.index("Table 7:")]}
    extra = {"bahrampour2016-table5": Counter(), "bahrampour2016-table7": Counter({"6.5": 1, "23.2": 1})}
    for name, block in blocks.items():
        ours = Counter(v for r in rep.targets()[name]["rows"] for v in r["values"])
        assert Counter(re.findall(r"\d+\.\d+", block)) == ours + extra[name], name
