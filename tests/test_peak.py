"""The machine's peak per precision, what "% of peak" divides by, and the warning on a rate above it."""

import importlib.util

import pytest

from dlbench import api, frameworks
from dlbench.measure import peak
from dlbench.models import get_model
from dlbench.report.summary import summary_dict
from dlbench.report.tables import build_content
from dlbench.storage.store import Store
from tests.synthetic_runs import ENV, cell, finish, metrics, new_run, timed_samples, verify_pass

RATES = {"numpy": 90.0, "torch": 100.0, "torch:bf16": 400.0, "torch:int8": 800.0}


def test_each_precision_has_its_own_peak():
    assert peak.peak_for(RATES, "fp32") == ("torch", 100.0)
    assert peak.peak_for(RATES, "bf16") == ("torch:bf16", 400.0)
    assert peak.peak_for(RATES, "amp-bf16") == ("torch:bf16", 400.0)  # computes in bfloat16
    assert peak.peak_for(RATES, "int8") == ("torch:int8", 800.0)
    assert peak.peak_for(RATES, "fp16") is None  # never another precision's peak
    assert peak.peak_for({"numpy": 50.0, "torch": 60.0}, "bf16") is None  # a run from before precisions
    assert peak.by_precision(RATES) == {"fp32": 100.0, "bf16": 400.0, "int8": 800.0}
    assert peak.describe("torch:bf16", 400.0) == "bf16 peak 400 GFLOP/s (torch:bf16)"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_reduced_precision_peaks_are_measured_where_the_cpu_has_them(monkeypatch):
    monkeypatch.setattr(peak, "SIZE", 128)
    plain = peak.measure_peak_gflops(frameworks.peak_engines().values(), 1, flags=frozenset({"avx2"}))
    assert set(plain) - {"onnxruntime", "openvino"} == {"numpy", "torch"}
    amx = peak.measure_peak_gflops(frameworks.peak_engines().values(), 1, flags=frozenset({"amx_bf16", "amx_int8"}))
    assert {"torch:bf16", "torch:int8"} <= set(amx) and all(r > 0 for r in amx.values())


def _run(db, precisions=("fp32", "bf16", "int8"), ms: float = 10.0, batch: int = 64) -> str:
    store = Store(db)
    try:
        run_id = new_run(store)
        store.save_peak(run_id, 1, RATES)
        for p in precisions:
            store.save_verification(run_id, "torch", "eager", "lenet", "cpu", "pass", "", {}, precision=p)
            store.save_cell(run_id, {**cell("torch", "eager", "forward", batch, 1), "precision": p,
                                     "key": f"torch/eager/lenet/forward/b{batch}/t1/cpu/{p}"},
                            "ok", "", 1.0, [], metrics(), timed_samples(ms))
        verify_pass(store, run_id, "torch", "eager")
        finish(store, run_id)
        return run_id
    finally:
        store.close()


def test_a_cell_is_a_share_of_its_own_precisions_peak(tmp_db):
    """Regression: bf16 and int8 cells were divided by the float32 peak (322% seen)."""
    res = api.results(_run(tmp_db), tmp_db)
    by = {c.cell.precision: c for c in res.cells}
    gflops = by["fp32"].gflops
    assert gflops == pytest.approx(get_model("lenet").flops_per_sample * 64 / 10e-3 / 1e9, rel=0.02)
    assert by["fp32"].pct_peak == pytest.approx(100 * gflops / 100.0)
    assert by["bf16"].pct_peak == pytest.approx(100 * by["bf16"].gflops / 400.0)
    assert by["int8"].pct_peak == pytest.approx(100 * by["int8"].gflops / 800.0)
    assert by["bf16"].peak == "bf16 peak 400 GFLOP/s (torch:bf16)"
    assert res.peak_gflops(1) == 100.0 and res.peak_gflops(1, "int8") == 800.0
    peaks = build_content(res).peaks
    assert [c.label for c in peaks.columns][-3:] == ["fp32 peak GFLOP/s", "bf16 peak GFLOP/s", "int8 peak GFLOP/s"]


def test_a_rate_above_its_peak_is_flagged(tmp_db):
    """A rate above the measured peak of its precision is impossible: the FLOP count or the peak is wrong."""
    res = api.results(_run(tmp_db, ("fp32",), ms=0.05), tmp_db)  # lenet at 64 samples in 50 us: over 100 GFLOP/s
    (c,) = res.cells
    assert c.pct_peak > 100
    assert c.rate_warnings and "above the measured fp32 peak (100 GFLOP/s at 1 thread(s))" in c.rate_warnings[0]
    assert any("above the measured fp32 peak" in w for _, w in build_content(res).warnings)
    quiet = api.results(_run(tmp_db, ("fp32",)), tmp_db)
    assert quiet.cells[0].rate_warnings == []


def test_the_export_names_the_peak_and_carries_the_rate_warning(tmp_db):
    from dlbench.report.export import export_rows

    rows = {r["precision"]: r for r in export_rows(api.results(_run(tmp_db, ("fp32", "bf16"), ms=0.05), tmp_db))}
    assert rows["bf16"]["peak"] == "bf16 peak 400 GFLOP/s (torch:bf16)"
    assert "above the measured fp32 peak" in rows["fp32"]["warnings"]


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_the_float32_peak_counts_onnx_runtimes_gemm_too(monkeypatch):
    """ONNX Runtime's MLAS SGEMM ran 1.8x NumPy's and torch's on an AVX-512 EPYC core, so its fcn-r forward
    stood at 180% of a float32 peak measured by those two alone; the probe now times MLAS as well."""
    import numpy as np

    monkeypatch.setattr(peak, "SIZE", 64)
    rates = peak.measure_peak_gflops(frameworks.peak_engines().values(), 1, flags=frozenset())
    assert rates["onnxruntime"] > 0 and peak.peak_for(rates, "fp32")[1] == max(
        r for e, r in rates.items() if peak.engine_precision(e) == "fp32")
    a, b = (np.random.default_rng(i).standard_normal((64, 64), dtype=np.float32) for i in (0, 1))
    from dlbench.frameworks.onnxruntime.gemm import matmul

    np.testing.assert_allclose(matmul(1)(a, b), a @ b, rtol=1e-4, atol=1e-4)  # it multiplies


def test_the_peak_is_the_fastest_engine_each_in_its_own_process(tmp_db, monkeypatch):
    """#45: the float32 peak was NumPy's, torch's and MLAS's GEMMs timed one after another in one process, and a
    framework's cells stood above it. Each engine now runs in a process of its own, pinned to the thread count;
    the fastest sets the peak and is named; an engine not installed or whose process fails is skipped with its
    reason; a cell above the peak still warns."""
    from dlbench.core.cell import Cell
    from dlbench.launch.subprocess import JobOutcome
    from dlbench.running import runner

    def engine(name: str, module: str = "numpy") -> peak.PeakEngine:
        return peak.PeakEngine(name, (module,), lambda threads, flags: {})  # measured by run_job below

    monkeypatch.setattr(frameworks, "peak_engines", lambda: {e.name: e for e in (
        engine("numpy"), engine("fast"), engine("absent", "dlbench_no_such_engine"), engine("broken"))})
    monkeypatch.delenv("DLBENCH_PEAK_CACHE", raising=False)
    jobs, lines = [], []

    def run_job(job, timeout_s, threads=None, python=None, extra_env=None):
        jobs.append((job.engine, job.threads, threads))
        if job.engine == "broken":
            return JobOutcome("failed", None, "exit code 1: RuntimeError: no GEMM kernel", 1.0, 1)
        return JobOutcome("ok", {"gflops": {job.engine: {"numpy": 100.0, "fast": 300.0}[job.engine]}}, "", 1.0, 0)

    store = Store(tmp_db)
    try:
        run_id = store.create_run("synthetic", {"name": "synthetic"})
        store.save_environment(run_id, ENV)
        runner._peaks(store, run_id, [Cell("torch", "eager", "lenet", "forward", 64, 1)],
                      lambda event, **kw: lines.append(kw.get("text", "")), run_job)
        assert jobs == [("numpy", 1, 1), ("fast", 1, 1), ("broken", 1, 1)]  # one process each, none for "absent"
        assert store.peaks(run_id) == {1: {"numpy": 100.0, "fast": 300.0}}
        kept = lines[-1]
        assert "fp32 peak 300 GFLOP/s (fast)" in kept
        assert "absent skipped: not installed (no module dlbench_no_such_engine)" in kept
        assert "broken skipped: exit code 1: RuntimeError: no GEMM kernel" in kept
        store.save_verification(run_id, "torch", "eager", "lenet", "cpu", "pass", "", {})
        store.save_cell(run_id, {**cell("torch", "eager", "forward", 64, 1), "key": "torch/eager/lenet/forward/b64/t1"},
                        "ok", "", 1.0, [], metrics(), timed_samples(0.005))  # about 600 GFLOP/s
        finish(store, run_id)
    finally:
        store.close()
    res = api.results(run_id, tmp_db)
    (c,) = res.cells
    assert c.peak == "fp32 peak 300 GFLOP/s (fast)" and c.pct_peak > 100
    assert "above the measured fp32 peak (300 GFLOP/s at 1 thread(s))" in c.rate_warnings[0]
    # which engine set it, wherever the peak is shown: the report's peak table and show --json
    (row,) = build_content(res).peaks.rows
    assert (row[-1].text, row[-1].detail) == ("300", "fast")
    assert summary_dict(res)["peak_engine_by_precision"] == {"1": {"fp32": "fast"}}


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino is not installed")
def test_openvino_s_gemm_multiplies_at_float32(monkeypatch):
    """The oneDNN engine (OpenVINO's CPU plugin) computes the product it is timed on, at float32."""
    import numpy as np

    monkeypatch.setattr(peak, "SIZE", 64)
    a, b = (np.random.default_rng(i).standard_normal((64, 64), dtype=np.float32) for i in (0, 1))
    from dlbench.frameworks.openvino.gemm import matmul

    np.testing.assert_allclose(matmul(1)(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert peak.measure_engine(frameworks.peak_engines()["openvino"], 1, frozenset())["openvino"] > 0


def test_the_peak_engines_are_numpy_then_the_folders_gemm_parts():
    """measure/ names no framework: the GEMM engines are the framework folders' ``gemm`` parts, declared as
    data and gathered by the registry (NumPy's BLAS first, then the registry's order), each needing its
    framework's module and what its declaration adds."""
    engines = frameworks.peak_engines()
    assert list(engines) == ["numpy", *frameworks.with_part("gemm")] and engines["numpy"] is peak.NUMPY
    assert {"torch", "onnxruntime", "openvino"} <= set(engines)
    assert engines["onnxruntime"].modules == ("onnxruntime", "onnx") and engines["torch"].modules == ("torch",)
