"""Energy per cell (dlbench.measure.energy, dlbench.report.energy): counters read from a planted powercap
tree and a stand-in NVML, the arithmetic (wrap-around included), the window matched to the timed calls,
and `dlbench run`/`show`/`report` with and without counters."""

import dataclasses
import json
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.measure import energy
from dlbench.measure.energy import POWERCAP_ROOT_ENV, Meter, figures, joules, nvml_counters, rapl_counters
from dlbench.measure.timer import Protocol, sampled_calls, time_callable
from tests.conftest import requires
from tests.test_warmup import NoisyClock

#: a package counter's wrap range as a real Xeon reports it (max_energy_range_uj)
RANGE = 262143328850


def plant(root: Path, package_uj: int = 1_000_000, dram_uj: int = 500_000, rng: int = RANGE) -> Path:
    """A powercap tree: package-0 with core and dram subzones, a psys zone and an MMIO twin (left out)."""
    zones = {"intel-rapl:0": ("package-0", package_uj), "intel-rapl:0:0": ("core", 7),
             "intel-rapl:0:1": ("dram", dram_uj), "intel-rapl:1": ("psys", 9), "intel-rapl-mmio:0": ("package-0", 11)}
    for zone, (name, value) in zones.items():
        d = root / "intel-rapl:0" / zone if zone.startswith("intel-rapl:0:") else root / zone
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{value}\n")
        (d / "max_energy_range_uj").write_text(f"{rng}\n")
    return root


def set_counter(root: Path, zone: str, value: int) -> None:
    path = root / "intel-rapl:0" / (zone if zone != "intel-rapl:0" else "") / "energy_uj"
    path.write_text(f"{value}\n")


class FakeNVML:
    """A stand-in for pynvml: each GPU's total-energy counter (mJ) returns its readings in turn."""

    class NVMLError(Exception):
        pass

    def __init__(self, readings: dict[int, list[int]], count: int = 2):
        self.readings, self.count, self.shut = {i: list(v) for i, v in readings.items()}, count, False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, i):
        if i >= self.count:
            raise self.NVMLError(f"invalid index {i}")
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle not in self.readings:
            raise self.NVMLError("Not Supported")
        values = self.readings[handle]
        return values.pop(0) if len(values) > 1 else values[0]


def test_the_powercap_tree_gives_each_package_and_its_dram_and_nothing_that_overlaps(tmp_path):
    counters, notes = rapl_counters(plant(tmp_path))
    assert [(c.domain, c.source, c.unit_j, c.wrap) for c in counters] == [
        ("package-0", "rapl", 1e-6, RANGE), ("dram-0", "rapl", 1e-6, RANGE)]
    assert counters[0].counter == str(tmp_path / "intel-rapl:0" / "energy_uj")
    assert notes == []


def test_the_counters_arithmetic_with_wrap_around():
    c = {"counter": "x", "unit_j": 1e-6, "wrap": RANGE, "start": 1_000, "end": 3_001_000}
    assert joules(c) == pytest.approx(3.0)
    wrapped = {**c, "start": RANGE - 1_000_000, "end": 2_000_000}  # end < start: one wrap, add the range
    assert joules(wrapped) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="went back"):  # NVML's counter has no wrap: going back is no figure
        joules({**c, "wrap": None, "unit_j": 1e-3, "start": 5, "end": 4})


def test_figures_are_joules_per_sample_and_watts_of_the_window():
    def record(package_end, seconds, calls):
        return {"window_ns": int(seconds * 1e9), "calls": calls, "per_call": 8, "unit": "sample", "looked_for": [],
                "counters": [{"domain": "package-0", "source": "rapl", "counter": "p", "unit_j": 1e-6, "wrap": RANGE,
                              "start": RANGE - 2_000_000, "end": package_end},
                             {"domain": "dram-0", "source": "rapl", "counter": "d", "unit_j": 1e-6, "wrap": RANGE,
                              "start": 0, "end": 800_000}]}
    # process 0: 2 J + 6 J (wrapped) + 0.8 J = 8.8 J over 10 calls of 8 samples, in 2 s
    # process 1: 2 J + 2 J + 0.8 J = 4.8 J over 20 calls of 8 samples, in 1 s; process 2 like 0
    f = figures([record(6_000_000, 2.0, 10), record(2_000_000, 1.0, 20), record(6_000_000, 2.0, 10)])
    assert f["unit"] == "sample" and f["processes"] == 3
    assert f["j_per_unit_processes"] == pytest.approx([8.8 / 80, 4.8 / 160, 8.8 / 80])
    assert f["j_per_unit"] == pytest.approx(8.8 / 80)  # the median over processes
    assert f["watts_processes"] == pytest.approx([4.4, 4.8, 4.4]) and f["watts"] == pytest.approx(4.4)
    assert f["j_per_unit_by_domain"] == pytest.approx({"package-0": 8.0 / 80, "dram-0": 0.8 / 80})
    assert [c["counter"] for c in f["counters"]] == ["p", "d"] and "start" not in f["counters"][0]
    assert f["warnings"] == []


def test_a_window_long_enough_for_two_wraps_is_flagged():
    rec = {"window_ns": int(400e9), "calls": 1, "per_call": 1, "unit": "sample", "looked_for": [],
           "counters": [{"domain": "package-0", "source": "rapl", "counter": "p", "unit_j": 1e-6, "wrap": RANGE,
                         "start": 0, "end": 10}]}
    assert "more than one wrap" in figures([rec])["warnings"][0]


def test_the_meter_reads_a_planted_tree_around_its_window_across_a_wrap(tmp_path):
    root = plant(tmp_path, package_uj=RANGE - 500_000, dram_uj=100)
    meter = Meter("cpu", root=root)
    meter.start()
    set_counter(root, "intel-rapl:0", 1_500_000)  # the package counter wrapped: 2 J
    set_counter(root, "intel-rapl:0:1", 250_100)  # 0.25 J
    meter.stop()
    rec = meter.record(calls=5, per_call=4, unit="sample")
    assert [(c["domain"], c["start"], c["end"]) for c in rec["counters"]] == [
        ("package-0", RANGE - 500_000, 1_500_000), ("dram-0", 100, 250_100)]
    assert rec["looked_for"] == ["NVML: not read (a CPU cell)"]
    f = figures([rec])
    assert f["j_per_unit"] == pytest.approx(2.25 / 20)
    assert f["watts"] == pytest.approx(2.25 / (rec["window_ns"] / 1e9))


def test_a_fake_nvml_gives_the_gpu_the_cell_runs_on(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNVML({0: [1, 1], 1: [9_000, 10_000, 13_500]})  # read once when found, then start and stop
    meter = Meter("cuda:1", root=tmp_path / "none", nvml=nvml)
    meter.start()
    meter.stop()
    meter.close()
    rec = meter.record(calls=7, per_call=1, unit="token")
    (c,) = rec["counters"]
    assert (c["domain"], c["source"], c["unit_j"], c["wrap"], c["start"], c["end"]) == (
        "gpu1", "nvml", 1e-3, None, 10_000, 13_500)
    assert c["counter"] == "nvmlDeviceGetTotalEnergyConsumption(gpu 1)"
    assert nvml.shut
    assert rec["looked_for"] == [f"RAPL: no powercap directory {tmp_path / 'none'}"]
    f = figures([rec])
    assert f["unit"] == "token" and f["j_per_unit"] == pytest.approx(3.5 / 7)
    # CUDA_VISIBLE_DEVICES maps the cell's cuda:0 to NVML's index 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert energy.gpu_indices("cuda") == [1] and energy.gpu_indices("cpu") == []


def test_without_a_counter_it_says_which_were_looked_for_and_estimates_nothing(tmp_path):
    assert nvml_counters(None, [0]) == ([], ["NVML: pynvml (nvidia-ml-py) is not installed"])
    no_energy = FakeNVML({}, count=1)  # a GPU before Volta: no total-energy counter
    assert "has no total-energy counter" in nvml_counters(no_energy, [0])[1][0]
    empty = tmp_path / "powercap"
    empty.mkdir()
    meter = Meter("cpu", root=empty)
    meter.start()
    meter.stop()
    rec = meter.record(3, 4, "sample")
    assert rec["counters"] == []
    assert figures([rec, rec]) == {"unit": "sample", "no_counter": f"RAPL: no intel-rapl:* zone under {empty}; "
                                                                   "NVML: not read (a CPU cell)"}
    bad = plant(tmp_path / "bad")
    (bad / "intel-rapl:0" / "energy_uj").write_text("not a number\n")
    counters, notes = rapl_counters(bad)
    assert [c.domain for c in counters] == ["dram-0"] and "intel-rapl:0/energy_uj unreadable" in notes[0]


class CountingMeter:
    """A meter that notes how many calls had been made when it was read."""

    def __init__(self, clock):
        self.clock, self.started, self.stopped = clock, None, None

    def start(self):
        self.started = self.clock.calls

    def stop(self):
        self.stopped = self.clock.calls


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_the_window_holds_exactly_the_sampled_calls(scale):
    """From the first sampled call to the last, those later found to be warm-up included (their energy is
    in the window); a loop of k calls per sample (calls under 1 ms) counts k."""
    c = NoisyClock(lambda n: scale * (8e6 if n < 50 else 5e6))  # 40 slow calls after the 10 fixed ones
    meter = CountingMeter(c)
    timing = time_callable(c.fn, lambda _: None, Protocol(warmup=10, min_iters=60, min_time_s=0.0), clock=c.clock,
                           meter=meter)
    assert meter.started == 10  # after the warm-up's fixed calls
    assert meter.stopped == c.calls  # after the last
    assert meter.stopped - meter.started == sampled_calls(timing)
    if scale == 1.0:
        assert timing.warmup_found == 40 and timing.loop_k == 1
    else:
        assert timing.loop_k > 1


@requires("torch")
def test_generation_reads_its_counters_around_the_timed_generations_only(tmp_path, monkeypatch):
    """Each generation adds 1 mJ to the planted counter (the untimed warm-up's included): the window holds the
    timed generations' tokens alone, so 2 generations of batch 2 x 5 new tokens give 1 mJ / 10 tokens."""
    from dlbench.core.cell import Cell
    from dlbench.core.job import CellJob
    from dlbench.scenarios import generate
    from dlbench.scenarios.generate import Generate, GenerationSettings

    root = plant(tmp_path / "powercap")
    monkeypatch.setenv(POWERCAP_ROOT_ENV, str(root))
    real = generate.greedy

    def metered(*args):
        package = root / "intel-rapl:0" / "energy_uj"
        package.write_text(f"{int(package.read_text()) + 1000}\n")
        return real(*args)

    monkeypatch.setattr(generate, "greedy", metered)
    settings = dataclasses.asdict(GenerationSettings(prompt=6, new_tokens=5, runs=2))
    job = CellJob(threads=None, cell=Cell("torch", "eager", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate", 2, 1), seed=0, data_dir=None, protocol={"max_time_s": 60},
                  settings=settings, extra={"phase": "measure"})
    generate = Generate()
    rec = generate.work(job, generate.settings_from(job))["energy"]
    assert (rec["calls"], rec["per_call"], rec["unit"]) == (2, 10, "token")
    f = figures([rec])
    assert f["unit"] == "token" and f["j_per_unit"] == pytest.approx(1e-3 / 10)


def test_show_and_report_write_joules_per_token_for_generation():
    from dlbench.report import energy as shown
    from dlbench.storage.cell_result import CellResult, RunResults
    from dlbench.storage.store import CellRecord

    rec = {"window_ns": int(2e9), "calls": 4, "per_call": 32, "unit": "token", "looked_for": [],
           "counters": [{"domain": "gpu0", "source": "nvml", "counter": "nvmlDeviceGetTotalEnergyConsumption(gpu 0)",
                         "unit_j": 1e-3, "wrap": None, "start": 100, "end": 64_100}]}
    cell = CellRecord(1, "r", "torch/eager/gpt2/generate/b4/t1/cuda", "torch", "eager", "gpt2", "generate", 4, 1,
                      "cuda", "synthetic", "ok", "", 1.0, [], {"energy": [rec]})
    res = RunResults({"id": "r"}, {}, {}, {}, [CellResult(cell, "pass", energy=figures([rec]))])
    table = shown.table(res)
    assert table.columns[1].label == "J/token"
    assert [v.text for v in table.rows[0]][1:] == ["0.500 J/token", "32.0", "gpu0 0.500", "NVML gpu0 (1 mJ)"]
    assert shown.summary(res)["cells"][0]["j_per_token"] == pytest.approx(0.5)
    assert shown.section(res).tables == [table]


# --- end to end ------------------------------------------------------------------------------------------
RUN = ["run", "--model", "lenet", "--framework", "fakefw", "--variant", "metered", "--scenario", "forward",
       "--batch", "4", "--threads", "1", "--warmup", "1", "--min-iters", "3", "--min-time", "0", "--repeats", "2"]


@requires("torch")
def test_a_run_with_counters_shows_joules_per_sample(tmp_path, tmp_db, monkeypatch, capsys, fake_framework):
    """Each call of the ``metered`` variant adds 1 mJ to the planted package counter: 1 mJ / 4 samples per call,
    whatever the number of calls, only if the window holds exactly the timed calls."""
    monkeypatch.setenv(POWERCAP_ROOT_ENV, str(plant(tmp_path / "powercap")))
    assert main([*RUN, "--db", str(tmp_db)]) == 0
    capsys.readouterr()
    assert main(["show", "--db", str(tmp_db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (cell,) = data["energy"]["cells"]
    assert data["energy"]["no_counter"] is None
    assert cell["j_per_sample"] == pytest.approx(1e-3 / 4) and cell["processes"] == 2
    assert cell["j_per_unit_by_domain"] == pytest.approx({"package-0": 1e-3 / 4, "dram-0": 0.0})
    assert [c["text"] for c in cell["counters"]] == ["RAPL package-0 (1 µJ)", "RAPL dram-0 (1 µJ)"]
    assert cell["watts"] > 0
    assert main(["show", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "0.000250 J/sample" in out and "RAPL package-0 (1 µJ)" in out and "no counter" not in out
    assert main(["export", "--db", str(tmp_db), "--format", "json"]) == 0
    (exported,) = json.loads(capsys.readouterr().out)["cells"]
    assert exported["energy"]["j_per_unit"] == pytest.approx(1e-3 / 4)
    assert main(["report", "--db", str(tmp_db), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Energy" in md and "0.000250 J/sample" in md
    assert "j_per_unit" in (tmp_path / "report" / "cells.csv").read_text().splitlines()[0]


@requires("torch")
def test_a_run_without_counters_says_so_once(tmp_path, tmp_db, monkeypatch, capsys, fake_framework):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(POWERCAP_ROOT_ENV, str(tmp_path / "empty"))  # a powercap directory without RAPL zones
    args = [{"metered": "ok", "2": "1"}.get(a, a) for a in RUN]
    assert main([*args, "--db", str(tmp_db)]) == 0
    capsys.readouterr()
    assert main(["show", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert out.count("no counter") == 1 and "J/sample" not in out
    assert f"no intel-rapl:* zone under {tmp_path / 'empty'}" in out
    assert main(["show", "--db", str(tmp_db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["energy"]["cells"] == [] and "no counter on this machine" in data["energy"]["no_counter"]
    assert main(["report", "--db", str(tmp_db), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.count("no counter on this machine") == 1


def test_a_damaged_energy_record_sets_its_cell_aside_and_the_rest_reads(tmp_path, capsys):
    """A stored record that cannot give a figure (a counter that is text, a window of zero seconds) is damage:
    the cell is named and set aside, as a damaged sample is (docs/reliability.md), never a traceback."""
    import sqlite3

    from tests.synthetic_runs import compare_pair

    db = tmp_path / "r.db"
    a, _ = compare_pair(db)
    record = {"window_ns": 0, "calls": 1, "per_call": 1, "unit": "sample", "looked_for": [],
              "counters": [{"domain": "package-0", "source": "rapl", "counter": "p", "unit_j": 1e-6, "wrap": RANGE,
                            "start": 0, "end": "x"}]}
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE cells SET metrics=json_set(metrics, '$.energy', json(?)) WHERE id=1",
                     (json.dumps([record]),))
    conn.close()
    assert main(["show", a, "--db", str(db), "--json"]) in (0, 1)
    out, err = capsys.readouterr()
    assert "set aside" in err and "figures cannot be computed" in err and "Traceback" not in err
    assert json.loads(out)["models"]["lenet"]  # the run's other cells read
