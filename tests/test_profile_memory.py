"""``--profile`` does not inflate the stored peak memory (issue #31, defect 9): the measuring process
reads its peak before the profiler runs, and the profiled peak is kept apart in the profile's record."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import requires

SRC = str(Path(__file__).resolve().parents[1] / "src")

SCRIPT = r"""
import json, sys
from dlbench.running import runner
from dlbench.planning.plan import suite_from_dict
from dlbench.scenarios import registry, timed

suite = suite_from_dict({"models": ["lenet"], "frameworks": ["torch"], "scenarios": ["forward"], "threads": [1],
                         "batch_sizes": [2], "protocol": {"warmup": 1, "min_iters": 3, "min_time_s": 0, "repeats": 1}})
_, cells = runner.plan_cells(suite)
scenario = registry.get("forward")
job = scenario.job(cells[0], suite)
job.extra["profile"] = {"calls": 1, "outdir": sys.argv[1]}
held = []

def fat_profiler(backend, fn, job):  # a profiler that holds 300 MiB, as a trace buffer can
    block = bytearray(300 * 2**20)
    block[::4096] = b"\1" * len(range(0, len(block), 4096))
    held.append(block)
    return {"failed": "stand-in profiler"}

timed._profile = fat_profiler
out = scenario.work(job, scenario.settings_from(job))
print(json.dumps({"peak": out["peak_rss_bytes"], "after": timed.peak_rss_bytes(),
                  "profiled": out["profile"].get("peak_rss_bytes")}))
"""


@requires("torch")
def test_the_profilers_memory_is_not_in_the_stored_peak(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "profile")], capture_output=True, text=True,
                          env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["after"] - got["peak"] > 250 * 2**20, got  # the stored peak leaves the profiler's 300 MiB out
    assert got["profiled"] - got["peak"] > 250 * 2**20, got  # the profile's record keeps them


def test_a_peak_stored_with_the_profilers_memory_is_marked(tmp_path, capsys):
    """A run profiled before the fix holds the inflated peak: ``show`` marks it."""
    from dlbench.cli.main import main
    from dlbench.storage.store import Store
    from tests.synthetic_runs import cell, finish, metrics, new_run, timed_samples, verify_pass

    db = tmp_path / "r.db"
    store = Store(db)
    run_id = new_run(store)
    verify_pass(store, run_id, "fakefw", "ok")
    for scenario, profile in (("forward", {"ops": [], "trace": "t.json"}),
                              ("train_step", {"ops": [], "trace": "t.json", "peak_rss_bytes": 900 * 2**20})):
        store.save_cell(run_id, cell("fakefw", "ok", scenario, 4, 1), "ok", "", 1.0, [],
                        {**metrics(866), "profile": profile}, timed_samples(5.0))
    finish(store, run_id)
    store.close()
    assert main(["show", run_id, "--db", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]["lenet"]
    assert row["peak_includes_profiler"] is True
    assert main(["show", run_id, "--db", str(db)]) == 0
    assert "866 (with profiler)" in capsys.readouterr().out
