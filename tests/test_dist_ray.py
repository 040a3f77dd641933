"""Ray: the parameter server (asynchronous with staleness, synchronous for comparison),
``--launcher ray`` against a local head started with ``ray start --head`` and stopped after, and
cells fanned out over two local "nodes" offering ``dlbench_node``."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.launch.group import procs_naming
from dlbench.running.ray import check_nodes
from tests.conftest import over_budget, requires

pytestmark = [requires("ray"), requires("torch"), pytest.mark.machine_wide]
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


def _start_node(args: list[str], temp: str, core: int | None = None) -> subprocess.Popen:
    """``ray start ARGS --block`` in a session of its own (on one core when ``core`` is given)."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    return subprocess.Popen([ray_bin, "start", *args, "--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=None if core is None else lambda: os.sched_setaffinity(0, {core}),
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})


def _stop_nodes(nodes: list[subprocess.Popen], temp: str) -> None:
    """Signal each node's session; what is left after 30 s is killed (never `ray stop`, which would
    stop every Ray on the machine)."""
    for node in nodes:
        os.killpg(node.pid, signal.SIGTERM)
    deadline = time.time() + 5  # ray start --block was seen to ignore SIGTERM for 30 s
    for node in nodes:
        try:
            node.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
    deadline = time.time() + 30
    while any(_session(n.pid) for n in nodes) and time.time() < deadline:
        time.sleep(0.5)
    for node in nodes:
        for pid in _session(node.pid):
            os.kill(pid, signal.SIGKILL)
    assert not procs_naming(temp)
    shutil.rmtree(temp, ignore_errors=True)  # Ray's session folder: it was left in the temp dir


def _ray_folders() -> set[str]:
    return {str(p) for d in {tempfile.gettempdir(), "/tmp"} for p in Path(d).glob("dlb-ray-*")}


@pytest.fixture(autouse=True, scope="module")
def no_ray_folder_left():
    """The tests leave no ``dlb-ray-*`` session folder in the system temp dir (issue #31)."""
    before = _ray_folders()
    yield
    left = _ray_folders() - before
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    assert not left, f"Ray session folders left behind: {sorted(left)}"


@pytest.fixture
def ray_head(monkeypatch):
    """A one-node Ray cluster on 127.0.0.1, in a session of its own, stopped afterwards."""
    from dlbench.launch.torchrun import free_port

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="dlb-ray-")
    head = _start_node(["--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false"], temp)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        _stop_nodes([head], temp)


@pytest.fixture
def two_nodes(monkeypatch):
    """Two one-CPU Ray "nodes" on this machine, each offering one dlbench_node and pinned to a core
    of its own (when there are two), as two machines of a cluster would be. Started, not waited for
    (a test can do other work meanwhile, then :func:`_wait_for` them)."""
    from dlbench.launch.torchrun import free_port

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    port, temp = free_port(), tempfile.mkdtemp(prefix="dlb-ray-")
    cores = sorted(os.sched_getaffinity(0))
    node = ["--num-cpus=1", '--resources={"dlbench_node": 1}']
    nodes = [_start_node(["--head", f"--port={port}", "--include-dashboard=false", *node], temp, cores[0])]
    try:
        address = f"127.0.0.1:{port}"
        nodes.append(_start_node([f"--address={address}", *node], temp, cores[-1]))
        yield address
    finally:
        _stop_nodes(nodes, temp)


def _wait_for(address: str, text: str, timeout: float = 60) -> None:
    """Until `ray status` shows ``text`` (the second node has joined)."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([ray_bin, "status", f"--address={address}"], capture_output=True, text=True)
        if text in out.stdout:
            return
        time.sleep(1)
    raise AssertionError(f"the Ray cluster at {address} never showed {text!r}")


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
@over_budget  # the fan-out test covers the Ray launcher in CI
def test_ray_launcher_runs_cells_as_tasks(tmp_db, ray_head):
    time.sleep(5)
    res = api.run(db=tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward", "scaling"], batches=[8],
                  threads=[1], protocol=TINY, distributed={"workers": [2], "launcher": "ray", "ray_address": ray_head})
    assert [c.cell.status for c in res.cells] == ["ok", "ok"], [c.cell.reason for c in res.cells]
    forward, scaling = res.cells
    assert forward.verified == "pass" and forward.samples_per_s > 0
    assert scaling.cell.metrics["ray_nodes"] == 1 and scaling.cell.metrics["params_identical"]
    assert scaling.cell.key.endswith("/ray")


def test_cells_fan_out_one_per_node(tmp_path, two_nodes, monkeypatch):
    """4 cells over 2 nodes: the same keys and statuses as a local run, both nodes used, never two
    cells on one node at once, each cell with its node's hardware and the peak's node."""
    kw = {"models": ["lenet"], "frameworks": ["torch"], "scenarios": ["forward"], "batches": [1, 2, 4, 8],
          "threads": [1], "protocol": TINY}
    local = api.run(db=tmp_path / "local.db", **kw)  # while the nodes start
    _wait_for(two_nodes, "2.0 dlbench_node")
    monkeypatch.delenv("DLBENCH_PEAK_CACHE", raising=False)  # the peak is measured through Ray, on a node it records
    fanned = api.run(db=tmp_path / "ray.db", distributed={"launcher": "ray", "ray_address": two_nodes}, **kw)
    assert sorted((c.cell.key, c.cell.status) for c in fanned.cells) == \
        sorted((c.cell.key, c.cell.status) for c in local.cells), [c.cell.reason for c in fanned.cells]
    assert {c.cell.status for c in fanned.cells} == {"ok"}
    ray_of = [c.cell.metrics["ray"] for c in fanned.cells]
    nodes = {r["node_id"] for r in ray_of}
    assert len(nodes) == 2 and all(r["dlbench_nodes"] == 2 for r in ray_of)
    for r in ray_of:
        assert r["cpu_model"] and r["cores"] == 1 and len(r["cpu_flags_digest"]) == 16 and r["hostname"]
        assert r["peak_node"]["node_id"] in nodes
    for node in nodes:
        spans = sorted((r["task_started"], r["task_ended"]) for r in ray_of if r["node_id"] == node)
        assert all(end <= start for (_, end), (start, _) in pairwise(spans)), spans
    assert not any("differ" in w for c in fanned.cells for w in c.cell.warnings)


def test_nodes_that_differ_are_refused_or_flagged():
    same = {"cpu_model": "Xeon 8480", "cpu_flags_digest": "ab", "gpus": []}
    nodes = {"n1": {**same, "hostname": "a"}, "n2": {**same, "hostname": "b"}}
    assert check_nodes(nodes, mixed_ok=False) is None
    nodes["n3"] = {**same, "hostname": "c", "cpu_model": "EPYC 9654"}
    with pytest.raises(UsageError, match="a, b: Xeon 8480.*c: EPYC 9654.*--mixed-nodes"):
        check_nodes(nodes, mixed_ok=False)
    assert "c: EPYC 9654" in check_nodes(nodes, mixed_ok=True)
    nodes["n3"] = {**same, "hostname": "c", "cpu_flags_digest": "cd"}  # same model, AVX-512 hidden by a VM
    with pytest.raises(UsageError):
        check_nodes(nodes, mixed_ok=False)


def test_mixed_nodes_goes_with_the_ray_launcher(capsys):
    assert main(["run", "--model", "lenet", "--framework", "torch", "--mixed-nodes"]) == 2
    assert "mixed_nodes (--mixed-nodes) goes with launcher ray" in capsys.readouterr().err
