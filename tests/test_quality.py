"""The quality gate on real text (issue #44): a trained decoder's next-token distribution at each precision
against the float64 reference's on the shipped text's held-out split (dlbench.gate.quality), with the
shipped checkpoint (src/dlbench/data/checkpoints/genesis-llama)."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.core.precision import PRECISIONS
from dlbench.data.synthetic import make_batch
from dlbench.gate import quality, reference
from dlbench.gate.verify import TOLERANCES, VERIFY_BATCH, _rel, verify_model
from dlbench.models import verify_spec
from dlbench.models.weights import Weights, init_weights
from dlbench.running.runner import stored_metrics
from dlbench.scenarios.base import CellOutcome
from dlbench.scenarios.checkpoint_recipe import MODEL, SHIPPED
from tests.conftest import requires

SHIPPED_REF = f"hf:{SHIPPED}"


def _int8_wrong_scale(weights: Weights) -> Weights:
    """The planted defect: every matrix quantized to int8 with one scale per output channel (its own), then
    dequantized with its neighbour's scale. Random weights' channels have nearly equal ranges, so it stays
    inside the int8 forward tolerance; a trained model's do not."""
    out = {}
    for name, a in weights.params.items():
        if a.ndim != 2:
            out[name] = a
            continue
        axis = 1 if name == "embed.weight" else 0  # canonical layouts: embedding (vocab, dim), dense (in, out)
        scale = np.abs(a).max(axis=axis, keepdims=True) / 127
        wrong = np.roll(scale, 1, axis=1 - axis)
        out[name] = (np.clip(np.round(a / scale), -127, 127) * wrong).astype(np.float32)
    return Weights(out, weights.state)


def test_identical_logits_have_no_divergence_and_full_agreement():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(50, 256)), rng.integers(0, 256, 50)
    fig = quality.figures(logits, logits, labels)
    assert fig["kl"] == pytest.approx(0, abs=1e-12) and fig["top1"] == 1 and fig["accuracy_ratio"] == 1
    assert fig["perplexity"] == pytest.approx(fig["reference_perplexity"])
    flipped = quality.figures(-logits, logits, labels)
    assert flipped["kl"] > 0.1 and flipped["top1"] < 0.1


def test_every_precision_has_a_bound_with_its_source():
    assert set(quality.BOUNDS) == set(PRECISIONS)
    for bound in quality.BOUNDS.values():
        assert "llama.cpp" in bound.source and "MLPerf" in bound.source
        assert 0 < bound.kl < 0.01 and 0.9 < bound.top1 < 1 and bound.accuracy_ratio == 0.99


def test_the_planted_int8_scale_defect_passes_on_random_weights_and_fails_on_the_trained_checkpoint():
    # on random weights of the same architecture the defect stays inside the int8 forward tolerance ...
    spec = verify_spec(MODEL).without_dropout()
    weights = init_weights(spec, 0, mode="verify")
    batch = make_batch(spec, VERIFY_BATCH, 0)
    random_error = _rel(reference.forward(spec, _int8_wrong_scale(weights), batch)[0],
                        reference.forward(spec, weights, batch)[0])
    assert random_error <= TOLERANCES["int8"].forward
    # ... and on the trained checkpoint it moves the next-token distribution past the int8 bound
    spec = verify_spec(SHIPPED_REF).without_dropout()
    trained = init_weights(spec, 0, mode="verify")
    damaged = _int8_wrong_scale(trained)
    fig = quality.measure(spec, trained, lambda b: reference.forward(spec, damaged, b)[0], 64)
    assert fig["held"] and fig["tokens"] > 5000
    failures = quality.failures("int8", fig)
    assert any(f.startswith("KL divergence") for f in failures), fig
    assert any(f.startswith("top-1 agreement") for f in failures), fig
    # the same quantization with each channel's own scale is within the bound
    honest = quality.measure(spec, trained, lambda b: reference.forward(spec, _int8_honest(trained), b)[0], 64)
    assert quality.failures("int8", honest) == [], honest


def _int8_honest(weights: Weights) -> Weights:
    out = {}
    for name, a in weights.params.items():
        if a.ndim != 2:
            out[name] = a
            continue
        scale = np.abs(a).max(axis=1 if name == "embed.weight" else 0, keepdims=True) / 127
        out[name] = (np.clip(np.round(a / scale), -127, 127) * scale).astype(np.float32)
    return Weights(out, weights.state)


def test_random_weights_are_measured_but_not_held_to_the_bounds():
    fig = {"kl": 1.0, "top1": 0.1, "accuracy_ratio": 0.5, "data": "genesis/test", "held": False}
    assert quality.failures("int8", fig) == []
    assert quality.failures("int8", {**fig, "held": True})


def test_the_gates_quality_figures_are_stored_in_the_cells_metrics():
    figures = {"kl": 1e-4, "top1": 0.99, "perplexity": 4.0, "reference_perplexity": 4.0}
    metrics = stored_metrics(CellOutcome("ok"), {"verdict": "pass", "quality": figures})
    assert metrics["quality"] == figures
    assert "quality" not in stored_metrics(CellOutcome("ok"), {"verdict": "pass"})


@requires("torch")
def test_torch_int8_with_the_planted_defect_is_not_equivalent_with_the_figure():
    from dlbench.frameworks.torch.backend import TorchBackend

    class WrongScale(TorchBackend):  # int8 whose weights went through the defect before torch quantizes them
        def build(self, spec, weights, device="cpu", variant=None):
            return super().build(spec, _int8_wrong_scale(weights), device, variant)

    bad = verify_model(WrongScale(), SHIPPED_REF, precision="int8")
    assert bad.verdict == "fail" and not bad.checks["quality"], bad.reason
    assert "KL divergence" in bad.reason and "top-1 agreement" in bad.reason
    assert bad.quality["kl"] > quality.BOUNDS["int8"].kl


def test_a_rows_quality_is_shown_beside_its_time():
    from dlbench.report.summary import SummaryRow

    row = SummaryRow("torch", "eager", 8, 2, "cpu", "synthetic", "int8", "pass")
    assert row.quality_text == "–"
    row.quality = {"kl": 4.7e-4, "top1": 0.9855, "perplexity": 9.4612, "reference_perplexity": 9.4496}
    assert row.quality_text == "KL 4.7e-04, top-1 98.55%, ppl 9.461 (9.450)"
    assert row.to_dict()["quality"] == row.quality


@requires("torch")
def test_a_run_of_the_shipped_checkpoint_stores_and_shows_quality_beside_time(tmp_db, tmp_path, capsys):
    import json

    from dlbench import api
    from dlbench.cli.main import main
    from dlbench.report.build import write_report

    res = api.run(models=[SHIPPED_REF], frameworks=["torch"], scenarios=["forward"], threads=[1], batches=[2],
                  protocol={"repeats": 1, "warmup": 1, "min_iters": 3, "min_time_s": 0.1},
                  precisions=["fp32", "bf16"], db=tmp_db)
    assert {c.cell.precision: c.cell.status for c in res.cells} == {"fp32": "ok", "bf16": "ok"}
    for c in res.cells:  # the gate's figures, in each cell's own metrics
        assert c.cell.metrics["quality"]["kl"] <= quality.BOUNDS[c.cell.precision].kl
    report = write_report(res, tmp_path / "rep", db=tmp_db)
    md = report.markdown.read_text()
    assert "KL divergence vs float64 (held-out text)" in md and "top-1 agreement" in md
    assert any(p.name.startswith("quality-") for p in (tmp_path / "rep" / "plots").iterdir())  # the frontier
    assert main(["show", res.run_id, "--db", str(tmp_db), "--json"]) == 0
    rows = next(iter(json.loads(capsys.readouterr().out)["models"].values()))
    assert all(r["quality"]["top1"] > 0.97 for r in rows)
    assert main(["show", res.run_id, "--db", str(tmp_db)]) == 0
    assert "quality vs float64" in capsys.readouterr().out
