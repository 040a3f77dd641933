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
from dlbench import runner
from dlbench.plan import suite_from_dict
from dlbench.scenarios import registry, timed

suite = suite_from_dict({"models": ["lenet"], "frameworks": ["torch"], "scenarios": ["forward"], "threads": [1],
                         "batch_sizes": [2], "protocol": {"warmup": 1, "min_iters": 3, "min_time_s": 0, "repeats": 1}})
_, cells = runner.plan_cells(suite)
scenario = registry.get("forward")
job = {**scenario.job(cells[0], suite), "profile": {"calls": 1, "outdir": sys.argv[1]}}
held = []

def fat_profiler(backend, fn, job):  # a profiler that holds 300 MiB, as a trace buffer can
    block = bytearray(300 * 2**20)
    block[::4096] = b"\1" * len(range(0, len(block), 4096))
    held.append(block)
    return {"failed": "stand-in profiler"}

timed._profile = fat_profiler
out = scenario.work(job)
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
