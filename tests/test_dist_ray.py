"""Ray: the parameter server (asynchronous with staleness, synchronous for comparison) and
``--launcher ray`` against a local head started with ``ray start --head`` and stopped after."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dlbench import api
from dlbench.launch.group import procs_naming
from tests.conftest import requires

pytestmark = [requires("ray"), requires("torch")]
TINY = {"warmup": 2, "min_iters": 4, "min_time_s": 0.0, "repeats": 1, "timeout_s": 240}


def test_parameter_server_async_and_sync(tmp_db):
    res = api.run(db=tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["scaling"], batches=[8], threads=[1],
                  protocol=TINY, distributed={"workers": [2], "exchange": ["ps-async", "ps-sync"], "ps_shards": 2})
    by = {c.cell.metrics.get("exchange"): c for c in res.cells}
    assert {k: c.cell.status for k, c in by.items()} == {"ps-async": "ok", "ps-sync": "ok"}, \
        [c.cell.reason for c in res.cells]
    a, s = by["ps-async"].cell.metrics, by["ps-sync"].cell.metrics
    st = a["staleness"]
    assert st["n"] == a["updates"] * a["ps_shards"]  # one lag per push per shard
    assert sum(st["histogram"].values()) == st["n"] and 0 <= st["mean"] <= st["max"]
    assert a["samples_per_s_wall"] > 0 and a["ps_shards"] == 2 and len(a["shard_bytes"]) == 2
    assert s["mode"] == "sync" and "staleness" not in s
    assert by["ps-async"].samples_per_s > 0 and by["ps-sync"].samples_per_s > 0
    assert by["ps-sync"].cell.key.endswith("/w2/weak/ps-sync")
    assert a["leftover_pids"] == [] and s["leftover_pids"] == []  # Ray's daemons and workers all ended


@pytest.fixture
def ray_head(monkeypatch):
    """A one-node Ray cluster on 127.0.0.1, in a session of its own; everything in that session
    is stopped afterwards (never `ray stop`, which would stop every Ray on the machine)."""
    from dlbench.launch.torchrun import free_port

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="dlb-ray-")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    try:
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)  # ray start --block was seen to ignore SIGTERM for 30 s
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        deadline = time.time() + 30
        while _session(head.pid) and time.time() < deadline:
            time.sleep(0.5)
        for pid in _session(head.pid):
            os.kill(pid, signal.SIGKILL)
        assert not procs_naming(temp)


def _session(sid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


@pytest.mark.slow
def test_ray_launcher_runs_cells_as_tasks(tmp_db, ray_head):
    time.sleep(5)
    res = api.run(db=tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward", "scaling"], batches=[8],
                  threads=[1], protocol=TINY, distributed={"workers": [2], "launcher": "ray", "ray_address": ray_head})
    assert [c.cell.status for c in res.cells] == ["ok", "ok"], [c.cell.reason for c in res.cells]
    forward, scaling = res.cells
    assert forward.verified == "pass" and forward.samples_per_s > 0
    assert scaling.cell.metrics["ray_nodes"] == 1 and scaling.cell.metrics["params_identical"]
    assert scaling.cell.key.endswith("/ray")
