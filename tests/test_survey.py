"""dlbench survey: live checks really ran (torch), introspection rules, data files, popularity
refresh against a fake GitHub, setup measuring on a tiny package, and the CLI."""

from __future__ import annotations

import email.message
import io
import json
import urllib.error
from pathlib import Path

import pytest
import yaml

from dlbench.cli.main import main
from dlbench.survey import api_coverage, catalog, collect, features, live_checks, popularity, setup, status
from dlbench.survey.catalog import TODAY
from dlbench.survey.installable import PIP_NAMES, _last_error
from tests.conftest import requires

PAPER_FRAMEWORKS = ("caffe", "caffe2", "neon", "theano", "torch7", "tensorflow", "cntk", "mxnet", "chainer",
                    "deeplearning4j", "h2o", "graphlab", "caffeonspark", "paddlepaddle")


# --- live checks, torch (each really runs fresh processes) ------------------------------------------
@requires("torch")
@pytest.mark.slow
def test_torch_forward_runs_and_matches_reference():
    cpu, gpu = live_checks.check_forward(TODAY["torch"])
    assert cpu["status"] == "verified", cpu
    assert cpu["evidence"]["cpu"]["output_shape"] == [4, 10]
    assert cpu["evidence"]["cpu"]["max_abs_diff_vs_numpy_reference"] < 1e-4
    assert gpu["status"] == ("verified" if cpu["evidence"]["gpu_visible"] else "not_verified")


@requires("torch")
@requires("onnxruntime")
@pytest.mark.slow
def test_torch_onnx_export_really_ran_in_onnxruntime():
    cell = live_checks.check_onnx(TODAY["torch"])
    assert cell["status"] == "verified", cell
    (attempt,) = cell["evidence"]
    assert attempt["exporter"].startswith("torch.onnx.export")
    assert 0.0 <= attempt["max_abs_diff"] <= live_checks.ONNX_TOL
    assert attempt["max_abs_output"] > 0.01  # a real output was compared, not zeros
    assert attempt["output_shape"] == [8, 10] and attempt["onnx_bytes"] > 0


@requires("torch")
@pytest.mark.slow
def test_torch_checkpoint_restart_in_a_new_process():
    cell = live_checks.check_checkpoint(TODAY["torch"])
    assert cell["status"] == "verified", cell
    pids = cell["evidence"]["pids"]
    assert pids["save"] != pids["resume"] and len(set(pids.values())) == 3
    assert cell["evidence"]["params"]["values"] == 431_080
    assert cell["evidence"]["params"]["max_abs_diff"] <= live_checks.RESUME_TOL
    losses = cell["evidence"]["losses"]
    assert len(losses["uninterrupted"]) == 6 and len(losses["resume"]) == 3
    assert losses["uninterrupted"][3:] == pytest.approx(losses["resume"], abs=1e-6)
    assert losses["uninterrupted"][:3] == pytest.approx(losses["save"], abs=1e-6)


@requires("torch")
@pytest.mark.slow
def test_torch_gloo_allreduce_two_processes():
    cell = live_checks.check_allreduce(TODAY["torch"])
    assert cell["status"] == "verified", cell
    ranks = cell["evidence"]["ranks"]
    assert [r["value"] for r in ranks] == [3.0, 3.0]  # 1 + 2
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert ranks[0]["pid"] != ranks[1]["pid"]
    assert "gloo" in ranks[0]["api"]


def test_a_probes_checks_are_its_declarations_data():
    """Which checks a probe runs is its declaration's ``probe_checks`` (read without importing it, not its
    source text), each mapped to its function in the probe's ``CHECKS``; the worker runs no other."""
    import ast
    import importlib.util

    from dlbench import frameworks
    from dlbench.survey import probes

    for name in frameworks.with_part("probe"):
        tree = ast.parse(Path(importlib.util.find_spec(frameworks.part_module(name, "probe")).origin).read_text())
        (table,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CHECKS"]
        assert tuple(k.value for k in table.keys) == frameworks.probe_checks(name), name
    assert probes.has_check("torch", "train") and not probes.has_check("onnxruntime", "train")
    assert not probes.has_check("caffe", "forward")  # a surveyed framework dlbench does not run
    with pytest.raises(ValueError, match="declares no 'train' check"):
        probes.run_probe({"framework": "onnxruntime", "check": "train"})


def test_a_forward_output_is_compared_with_the_float64_reference_above_the_probe():
    """Probes sit below the gate, so a forward check hands up its output on the reference case and the
    survey replaces it with the difference from the float64 reference."""
    from dlbench.frameworks.probing import OUTPUT, reference_case
    from dlbench.gate.reference import forward
    from dlbench.survey.probes import compared_with_reference

    spec, weights, batch = reference_case()
    reference, _ = forward(spec, weights, batch)
    result = compared_with_reference({"gpu_visible": False, "cpu": {OUTPUT: (reference + 0.25).tolist()}})
    assert result["cpu"] == {"max_abs_diff_vs_numpy_reference": pytest.approx(0.25)}


def test_live_verdicts_reject_bad_evidence(monkeypatch):
    """The judge, not just the probe: a resume in the same process or a wrong sum is a failure."""
    monkeypatch.setattr(live_checks, "_job", lambda *a, **k: ({"rank": k.get("rank"), "pid": 7, "value": 3.0,
                                                               "api": "fake"}, ""))
    cell = live_checks.check_allreduce(TODAY["torch"])
    assert cell["status"] == "failed"  # both ranks report one pid
    monkeypatch.setattr(live_checks, "_job", lambda *a, **k: (None, "failed: boom"))
    assert live_checks.check_allreduce(TODAY["torch"])["status"] == "failed"
    assert live_checks.check_checkpoint(TODAY["torch"])["reason"].startswith("uninterrupted: failed")


# --- API coverage rules ------------------------------------------------------------------------
def test_category_counts_aliases_once():
    def relu():
        pass
    cat = api_coverage.category({"relu": relu, "rectifier": relu, "tanh": abs}, "rule")
    assert cat["count"] == 2 and cat["names"] == ["relu", "tanh"] and cat["aliases"] == {"relu": ["rectifier"]}
    merged = api_coverage.union({"names": ["silu"], "aliases": {"silu": ["swish"]}},
                                {"names": ["swish", "crelu"], "aliases": {}})
    assert merged["count"] == 2 and merged["names"] == ["crelu", "silu"]


@requires("torch")
def test_torch_rules_put_relu_in_activations_and_linear_in_layers():
    res = api_coverage.torch_rules()
    acts, layers = set(res["activation"]["names"]), set(res["layer"]["names"])
    assert {"ReLU", "Tanh", "Softmax"} <= acts and "Linear" not in acts
    assert {"Linear", "Conv2d", "LSTM", "MultiheadAttention"} <= layers and "ReLU" not in layers
    assert "CrossEntropyLoss" in res["loss"]["names"] and "CrossEntropyLoss" not in layers
    assert not {"Sequential", "ModuleList", "Module", "RNNBase"} & layers
    assert {"SGD", "Adam"} <= set(res["optimizer"]["names"]) and "Optimizer" not in res["optimizer"]["names"]
    assert "kaiming_normal_" in res["initializer"]["names"] and "kaiming_normal" not in res["initializer"]["names"]
    for c in api_coverage.CATEGORIES:
        assert res[c]["count"] == len(res[c]["names"]) and res[c]["rule"]
    assert res["evaluation"]["count"] == 0 and res["evaluation"]["note"]


@requires("keras")
@requires("jax")
@pytest.mark.slow
def test_keras_and_jax_rules_in_a_worker():
    out = api_coverage.collect([TODAY["keras"], TODAY["jax"]])
    k = out["keras"]
    assert "relu" in k["activation"]["names"] and "Dense" in k["layer"]["names"]
    assert "ReLU" not in k["layer"]["names"] and "ReLU" in k["extra"]["activation_layers"]["names"]
    assert k["layer"]["aliases"]["Conv2D"] == ["Convolution2D"]
    assert "RandomFlip" not in k["layer"]["names"] and "RandomFlip" in k["extra"]["preprocessing_layers"]["names"]
    assert "Adam" in k["optimizer"]["names"] and "LossScaleOptimizer" not in k["optimizer"]["names"]
    assert {"L1", "L2", "L1L2"} <= set(k["regularizer"]["names"])
    j = out["jax"]
    assert "relu" in j["activation"]["names"] and "one_hot" not in j["activation"]["names"]
    assert {"Linear", "Conv"} <= set(j["layer"]["names"]) and {"sgd", "adam"} <= set(j["optimizer"]["names"])
    assert j["initializer"]["aliases"]["glorot_normal"] == ["xavier_normal"]


# --- feature matrix, status, data files ------------------------------------------------------------
def test_every_paper_framework_has_a_row():
    keys = catalog.all_framework_keys()
    assert set(PAPER_FRAMEWORKS) <= set(keys)
    assert {"torch", "jax", "keras", "onnxruntime"} <= set(keys)
    assert set(PIP_NAMES) <= set(keys)


def test_declared_values_are_sourced_and_dated():
    data = catalog.features_data()
    for key, entry in data["frameworks"].items():
        for row, cell in (entry.get("features") or {}).items():
            assert row in data["rows"], (key, row)
            assert cell.get("source") and cell.get("date"), (key, row)
            if cell["value"] == "unknown":
                assert cell.get("note"), (key, row)
            if entry["era"] == "today":
                assert cell["date"] == "2026-11-21" and cell["source"].startswith("https://"), (key, row)


def test_unsourced_cells_are_unknown_with_a_note():
    cell = features.declared_cell("paddlepaddle", "gpu")
    assert cell["status"] == "unknown" and "papers" in cell["note"]


def test_live_result_replaces_declared_value():
    declared = features.declared_cell("torch", "onnx_export")
    ok = features.cell_from_live(declared, {"status": "verified", "what": "ran", "evidence": {}})
    assert ok["status"] == "verified" and ok["value"] == declared["value"] and ok["declared"] == declared
    bad = features.cell_from_live(declared, {"status": "failed", "what": "ran", "reason": "diff 1.0"})
    assert bad["status"] == "failed" and bad["reason"] == "diff 1.0"
    skipped = features.cell_from_live(declared, {"status": "not_verified", "what": "x", "reason": "no GPU"})
    assert skipped["status"] == "declared" and skipped["not_verified"] == "no GPU"


@requires("torch")
def test_licence_is_read_from_installed_metadata():
    cell = features.licence_from_metadata(TODAY["torch"])
    assert cell["status"] == "verified" and "torch" in cell["what"] and cell["value"]


def test_status_rows_name_successors_and_measured_install_errors(monkeypatch):
    monkeypatch.setattr(status, "installable_data", lambda: {
        "date": "2026-11-22", "python": "3.11", "pip": "pip 23",
        "frameworks": {"cntk": {"status": "not_installable", "pip_name": "cntk",
                                "error": "ERROR: No matching distribution found for cntk"}}})
    targets = catalog.targets()
    rows = {r["framework"]: r for r in status.rows(["torch", "caffe2", "theano", "cntk", "neon"], targets)}
    if catalog.installed_distribution(TODAY["torch"]):
        assert rows["torch"]["status"] == "benchmarked here"
        assert rows["caffe2"]["status"] == "successor benchmarked" and rows["caffe2"]["successor"] == "PyTorch"
    pytensor_here = bool(catalog.installed_distribution(targets["pytensor"]) or catalog.env_version("pytensor"))
    theano = "successor benchmarked" if pytensor_here else "successor not benchmarked"
    assert rows["theano"]["status"] == theano and rows["theano"]["successor"] == "PyTensor"
    assert rows["cntk"]["status"] == "not installable here"
    assert "No matching distribution found for cntk" in rows["cntk"]["detail"]
    assert rows["neon"]["status"] == "not checked"  # no error is claimed that was not seen


def test_shipped_installable_file_holds_measured_outcomes():
    data = catalog.installable_data()
    if not data:
        pytest.skip("dlbench survey --check-installable has not been run")
    assert data["date"] and data["pip"] and data["python"]
    for key, entry in data["frameworks"].items():
        assert key in PIP_NAMES
        if entry["status"] == "not_installable":
            assert entry["error"] and entry["command"].startswith("python -m pip download --no-deps")
        elif entry["status"] == "downloadable":
            assert entry["file"] and entry["bytes"] > 0


def test_pip_error_line_keeps_the_cause():
    text = ("  Preparing metadata (setup.py): finished with status 'error'\n  error: subprocess-exited-with-error\n"
            "      ModuleNotFoundError: No module named 'pkg_resources'\n      [end of output]\n"
            "error: metadata-generation-failed\n\nhint: See above for details.\n")
    assert _last_error(text) == ("error: metadata-generation-failed (cause: ModuleNotFoundError: No module named "
                                 "'pkg_resources')")
    assert _last_error("ERROR: No matching distribution found for cntk\n") == \
        "ERROR: No matching distribution found for cntk"


# --- popularity ----------------------------------------------------------------------------------
class FakeResponse(io.BytesIO):
    def __init__(self, body: object, link: str = ""):
        super().__init__(json.dumps(body).encode())
        self.headers = email.message.Message()
        if link:
            self.headers["Link"] = link


def fake_github(request, timeout):
    url = request.full_url
    repo = url.split("/repos/")[1].split("/contributors")[0].split("?")[0]
    if "/contributors" in url:
        return FakeResponse([{"login": "a"}], link=f'<https://api.github.com/repositories/1/contributors?per_page=1'
                                                  f'&anon=1&page=2>; rel="next", <https://api.github.com/repositories/1/'
                                                  f'contributors?per_page=1&anon=1&page={len(repo)}>; rel="last"')
    if repo == "torch/torch7":
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)
    return FakeResponse({"full_name": repo, "stargazers_count": 10, "subscribers_count": 2, "forks_count": 3,
                         "created_at": "2015-01-02T03:04:05Z", "archived": False})


def test_refresh_popularity_with_a_fake_github(tmp_path):
    path = tmp_path / "popularity.yaml"
    path.write_text(catalog.POPULARITY_FILE.read_text())
    popularity.refresh(path, opener=fake_github, today="2030-01-01")
    data = yaml.safe_load(path.read_text())
    assert path.read_text().startswith("# Community numbers")  # header kept
    assert data["date"] == "2030-01-01"
    cur = data["frameworks"]["torch"]["current"]
    assert cur["stars"] == 10 and cur["watchers"] == 2 and cur["forks"] == 3 and cur["created"] == "2015-01-02"
    assert cur["contributors"] == len("pytorch/pytorch")  # from the Link header's last page
    assert data["frameworks"]["torch7"]["current"]["error"] == "HTTP 404 Not Found"
    assert data["frameworks"]["caffe"]["snapshots"][0]["contributors"] == 158  # the paper's snapshot stays
    rows = popularity.rows(["torch", "caffe"], path)
    assert rows[0]["stars"] == 10 and rows[0]["date"] == "2030-01-01"
    catalog.clear_cache()


def test_refresh_popularity_offline_changes_nothing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "popularity.yaml"
    path.write_text(catalog.POPULARITY_FILE.read_text())
    before = path.read_text()

    def offline(request, timeout):
        raise urllib.error.URLError("Temporary failure in name resolution")
    monkeypatch.setattr(popularity, "_default_opener", offline)
    assert main(["survey", "--refresh-popularity", "--popularity-file", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not refreshed" in err[0] and "name resolution" in err[0]
    assert path.read_text() == before


def test_shipped_popularity_has_only_paper_numbers():
    rows = popularity.rows(catalog.all_framework_keys())
    today = [r for r in rows if r["source"] == "today"]
    assert today and all(r["stars"] is None and r["contributors"] is None for r in today)
    assert all("not refreshed" in r["note"] for r in today if r["repo"])
    liu = {r["framework"]: r for r in rows if r["source"].startswith("liu2018")}
    assert liu["tensorflow"]["stars"] == 88544 and liu["cntk"]["forks"] == 3645
    bahrampour = {r["framework"]: r for r in rows if r["source"].startswith("bahrampour2016")}
    assert bahrampour["theano"]["contributors"] == 182 and bahrampour["caffe"]["google_group_members"] == 3517


# --- setup --------------------------------------------------------------------------------------
def test_conversion_effort_is_a_diff_or_says_not_implemented(tmp_path):
    (tmp_path / "frameworks" / "fw").mkdir(parents=True)
    (tmp_path / "frameworks" / "fw" / "backend.py").write_text("a\nb\nc\n")
    assert setup.conversion_effort("fw", tmp_path)["status"] == "not yet implemented in dlbench"
    (tmp_path / "frameworks" / "fw" / "dp_worker.py").write_text("a\nB\nc\nd\n")
    res = setup.conversion_effort("fw", tmp_path)
    assert res["status"] == "measured" and (res["added"], res["removed"]) == (2, 1)


@pytest.mark.slow
def test_measure_setup_on_a_tiny_package():
    res = setup.measure(["six==1.17.0"], "import six")
    if res.get("step") == "pip download" and "six" in res.get("error", ""):
        pytest.skip(f"package index not reachable: {res['error']}")
    assert res["status"] == "ok", res
    assert res["download_files"] == 1 and 5_000 < res["download_bytes"] < 100_000
    assert res["installed_bytes"] > 10_000 and res["install_s"] > 0 and res["import_s"] >= 0
    assert res["install_command"] == "pip install six==1.17.0"


# --- the command line ------------------------------------------------------------------------------
def test_cli_survey_paper_rows_json_and_out(tmp_path, capsys):
    assert main(["survey", "--no-live", "--framework", "caffe,theano,cntk", "--json", "--out", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["framework"] for r in data["frameworks"]] == ["caffe", "theano", "cntk"]
    assert data["features"]["matrix"]["caffe"]["core_language"]["value"] == "C++"
    assert data["features"]["matrix"]["caffe"]["core_language"]["status"] == "declared"
    for name in ("survey.md", "survey.json", "survey.html", "features.csv", "api_coverage.json", "popularity.md",
                 "setup.csv"):
        assert (tmp_path / name).exists(), name
    assert "| Core language |" in (tmp_path / "features.md").read_text()


def test_cli_survey_rejects_unknown_framework(capsys):
    assert main(["survey", "--framework", "nope"]) == 2
    assert "unknown framework" in capsys.readouterr().err


def test_pip_names_are_stated_for_every_paper_framework():
    assert Path(catalog.FEATURES_FILE).exists()
    for key in PAPER_FRAMEWORKS:
        if key != "tensorflow":
            assert key in PIP_NAMES, key


@requires("torch")
def test_successor_status_does_not_depend_on_the_selection():
    data = collect(["caffe2"], live=False)
    (row,) = data["frameworks"]
    assert row["status"] == ("successor benchmarked" if catalog.registered("torch") else "successor not benchmarked")
