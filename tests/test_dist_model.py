"""The scaling model and the framework-free pieces of the distributed work: formulas, cell keys,
planning scaling cells, interval arithmetic, the parameter server's update rule and staleness,
how a worker counts its wire bytes and leaves, and how a launcher explains a failed process."""

import numpy as np
import pytest

from dlbench.distributed import model as sm
from dlbench.distributed.ps import ShardCore, assign_shards, staleness
from dlbench.frameworks import data_parallel as common
from dlbench.planning.plan import Cell, expand, suite_from_dict
from dlbench.scenarios import registry


def test_ring_allreduce_formula():
    n, bw, lat = 100e6, 1.25e9, 25e-6
    assert sm.ring_allreduce_s(n, 1, bw, lat) == 0.0
    assert sm.ring_allreduce_s(n, 2, bw, lat) == pytest.approx(n / bw + 2 * lat)
    assert sm.ring_allreduce_s(n, 8, bw, lat) == pytest.approx(2 * 7 / 8 * n / bw + 14 * lat)
    # bandwidth term tends to 2 n / bw, latency term grows linearly
    assert sm.ring_allreduce_s(n, 1024, bw, 0) == pytest.approx(2 * n / bw, rel=1e-3)


def test_tree_and_ps_formulas():
    n, bw, lat = 1e6, 1e9, 1e-5
    assert sm.tree_allreduce_s(n, 8, bw, lat) == pytest.approx(2 * 3 * (lat + n / bw))
    assert sm.tree_allreduce_s(n, 5, bw, lat) == pytest.approx(2 * 3 * (lat + n / bw))
    # one shard per worker: each link carries n each way; fewer shards: the shards' links saturate
    assert sm.ps_exchange_s(n, 4, 4, bw, lat) == pytest.approx(2 * (lat + n / bw))
    assert sm.ps_exchange_s(n, 8, 2, bw, lat) == pytest.approx(2 * (lat + 4 * n / bw))
    with pytest.raises(ValueError, match="unknown algorithm"):
        sm.exchange_s("butterfly", n, 2, bw, lat)


def test_predict_weak_and_strong():
    p = sm.predict(0.1, 1e8, 4, 1e9, 0.0, "ring", "weak")
    assert p.compute_s == 0.1 and p.exchange_s == pytest.approx(0.15)
    assert p.speedup == pytest.approx(4 * 0.1 / 0.25) and p.efficiency == pytest.approx(0.4)
    s = sm.predict(0.1, 1e8, 4, 1e9, 0.0, "ring", "strong")
    assert s.compute_s == pytest.approx(0.025) and s.speedup == pytest.approx(0.1 / 0.175)
    one = sm.predict(0.1, 1e8, 1, 1e9, 0.0)
    assert one.speedup == 1.0 and one.efficiency == 1.0
    assert sm.error_pct(110, 100) == pytest.approx(10)


def test_extrapolation_rows_cover_links_algorithms_workers():
    rows = sm.extrapolate(0.05, 4e6, workers=(8, 1024))
    assert len(rows) == len(sm.LINKS) * len(sm.ALGORITHMS) * 2
    ring = {(r["link"], r["workers"]): r for r in rows if r["algorithm"] == "ring"}
    # a faster link never scales worse, and efficiency falls with W on 10 GbE
    assert ring[("100 Gb/s InfiniBand", 1024)]["efficiency"] > ring[("10 Gb/s Ethernet", 1024)]["efficiency"]
    assert ring[("10 Gb/s Ethernet", 8)]["efficiency"] > ring[("10 Gb/s Ethernet", 1024)]["efficiency"]
    assert all(0 < r["efficiency"] <= 1 for r in rows)


def test_cell_key_unchanged_for_single_worker_cells():
    c = Cell("torch", "eager", "lenet", "forward", 64, 1)
    assert c.key == "torch/eager/lenet/forward/b64/t1/cpu"
    s = Cell("torch", "eager", "lenet", "scaling", 64, 1, workers=2, scaling="strong", exchange="allreduce")
    assert s.key == "torch/eager/lenet/scaling/b64/t1/cpu/w2/strong/allreduce"
    assert s.per_worker_batch == 32 and s.global_batch == 64
    n = Cell("torch", "eager", "lenet", "scaling", 64, 1, workers=2, scaling="weak", cluster="netns")
    assert n.key.endswith("/w2/weak/allreduce/netns") and n.global_batch == 128


def test_expand_scaling_cells_weak_and_strong():
    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["forward", "scaling"], "batch_sizes": [6],
                             "threads": [1], "distributed": {"workers": [1, 2, 4], "scaling": "strong",
                                                             "exchange": ["allreduce", "ps-async"]}})
    cells = expand(suite, ["torch"], lambda fw, req: ["eager"], lambda m: 64, cores=2,
                   cells_of=lambda c: registry.get(c.scenario).cells(c, suite))
    forward = [c for c in cells if c.scenario == "forward"]
    scaling = [c for c in cells if c.scenario == "scaling"]
    assert len(forward) == 1 and forward[0].workers == 1
    # 6 does not split over 4 workers: strong scaling leaves W=4 out
    assert sorted((c.exchange, c.workers) for c in scaling) == [("allreduce", 1), ("allreduce", 2), ("ps-async", 1),
                                                                ("ps-async", 2)]
    assert len({c.key for c in cells}) == len(cells)


def test_bad_distributed_settings():
    from dlbench.core.errors import UsageError

    with pytest.raises(UsageError, match="workers"):
        suite_from_dict({"models": ["lenet"], "distributed": {"workers": [0]}})
    with pytest.raises(UsageError, match="scaling"):
        suite_from_dict({"models": ["lenet"], "distributed": {"scaling": "diagonal"}})


def test_union_of_intervals():
    assert common.union_ns([]) == 0
    assert common.union_ns([(0, 10), (5, 15), (20, 25)]) == 20
    assert common.union_ns([(0, 10), (2, 3)]) == 10


def test_steps_to_time_respects_min_iters_min_time_and_cap():
    ms = 1e6
    assert common.steps_to_time([50 * ms, 10 * ms], {"min_iters": 5, "min_time_s": 0.0}) == 5
    assert common.steps_to_time([50 * ms, 10 * ms], {"min_iters": 5, "min_time_s": 1.0}) == 100
    assert common.steps_to_time([50 * ms, 10 * ms], {"min_iters": 5, "min_time_s": 10.0, "max_time_s": 0.5}) == 50


def test_data_shards_partition_the_global_batch():
    from dlbench.data.synthetic import make_batch
    from dlbench.models import get_model

    spec = get_model("lenet", small=True)
    full = make_batch(spec, 8, 3)
    parts = [common.shard(spec, 8, r, 4, 3) for r in range(4)]
    assert np.array_equal(np.concatenate([p.x for p in parts]), full.x)
    assert np.array_equal(np.concatenate([p.y for p in parts]), full.y)


def test_shard_assignment_balances_bytes():
    groups = assign_shards({"a": 100, "b": 60, "c": 50, "d": 10}, 2)
    assert sorted(map(sorted, groups)) == [["a", "d"], ["b", "c"]]  # 110 bytes each
    assert assign_shards({"a": 1}, 3)[0] == ["a"]


def test_shard_async_updates_and_staleness():
    s = ShardCore({"w": np.ones(2, np.float32)}, lr=0.1, momentum=0.9, workers=2)
    v0, _ = s.pull()
    s.push({"w": np.ones(2, np.float32)}, v0)  # fresh
    s.push({"w": np.ones(2, np.float32)}, v0)  # computed on version 0, applied at version 1
    assert s.version == 2 and s.take_lags() == [0, 1]
    # torch SGD momentum: buf = g, then buf = 0.9 * 1 + 1
    assert s.params["w"] == pytest.approx(1 - 0.1 * 1 - 0.1 * 1.9)


def test_shard_sync_averages_then_applies_once():
    s = ShardCore({"w": np.zeros(1, np.float32)}, lr=1.0, momentum=0.0, workers=2)
    s.push_sync({"w": np.array([1.0], np.float32)}, 0)
    assert s.version == 0
    s.push_sync({"w": np.array([3.0], np.float32)}, 0)
    assert s.version == 1 and s.params["w"][0] == pytest.approx(-2.0)
    with pytest.raises(RuntimeError, match="version"):
        s.push_sync({"w": np.array([1.0], np.float32)}, 0)


def test_staleness_summary():
    st = staleness([0, 1, 1, 2, 5])
    assert st["n"] == 5 and st["max"] == 5 and st["histogram"] == {"0": 1, "1": 2, "2": 1, "5": 1}
    assert st["mean"] == pytest.approx(1.8) and staleness([]) == {"n": 0}


def test_combine_ranks_takes_slowest_step_and_mean_comm():
    per = [{"step_ns": [10, 20], "comm_ns": [4, 6], "compute_ns": [5, 5], "warmup_ns": [50]},
           {"step_ns": [12, 18], "comm_ns": [2, 2], "compute_ns": [7, 3], "warmup_ns": [40]}]
    out = common.combine_ranks(per)
    assert out["step_ns"] == [12, 20] and out["comm_ns"] == [3, 4] and out["compute_ns"] == [7, 5]
    assert out["warmup_ns"] == [50]


def test_digest_changes_with_any_bit():
    a = {"w": np.ones((2, 2), np.float32), "b": np.zeros(2, np.float32)}
    b = {k: v.copy() for k, v in a.items()}
    assert common.digest(a) == common.digest(b)
    b["w"][1, 1] = np.nextafter(np.float32(1), np.float32(2))
    assert common.digest(a) != common.digest(b)


def test_wire_window_counts_a_fast_peer_and_not_its_next_traffic(monkeypatch):
    """A peer that leaves a barrier first sends at once. Reading the counters after the opening
    barrier missed its first chunk (the 2-worker namespace run then counted below the ring's bytes,
    once in CI); and its traffic after the window must not count either."""
    wire = {"bytes": 1000}
    monkeypatch.setattr(common, "iface_bytes", lambda iface: wire["bytes"] if iface else None)
    peer = iter([300, 0, 7000])  # what the peer sends the moment each barrier releases it

    def barrier():
        wire["bytes"] += next(peer)

    with common.WireWindow("veth0", barrier) as w:
        wire["bytes"] += 50  # this worker's own steps
    assert w.moved == 350
    with common.WireWindow(None, lambda: None) as w:
        pass
    assert w.moved is None


def test_wire_window_does_not_wait_at_a_barrier_after_an_error(monkeypatch):
    calls = []
    with pytest.raises(RuntimeError), common.WireWindow("veth0", lambda: calls.append(1)):
        raise RuntimeError("a peer died")
    assert calls == [1] and common.WireWindow("veth0", lambda: None).moved is None


def test_workers_leave_without_interpreter_teardown():
    """torch's gloo sometimes aborted in C++ static destructors at exit (SIGABRT after the rank had
    done all its work; torchrun then failed the cell): workers end through ``common.leave``, which
    flushes what they printed and skips teardown (atexit handlers do not run)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import atexit, sys; from dlbench.frameworks import data_parallel as common; "
            "atexit.register(print, 'teardown'); "
            "print('result written', end=''); sys.stderr.write('note'); common.leave(3)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (3, "result written", "note")
    src = Path(common.__file__).parent
    assert 'if __name__ == "__main__":\n    common.leave(main(sys.argv))' in (src / "torch" / "dp_worker.py").read_text()
    for fw in ("jax", "tensorflow"):  # their runtimes' shutdown barriers run at exit: a skipped one failed a peer
        assert 'if __name__ == "__main__":\n    sys.exit(main(sys.argv))' in (src / fw / "dp_worker.py").read_text()


def test_a_rank_killed_by_a_signal_is_explained_with_its_last_words(tmp_path):
    """torchrun's report says only "Signal 6 (SIGABRT) received"; what the C++ runtime printed
    before it is the reason worth keeping (it was dropped, so a CI failure said nothing useful)."""
    from dlbench.launch import torchrun

    log = "\n".join([
        "[W1123 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
        "terminate called without an active exception",
        "E1123 api.py:1002] failed (exitcode: -6) local_rank: 0 (pid: 16111) of binary: python",
        "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):", "[0]:", "  rank      : 1 (local_rank: 0)",
        "  exitcode  : -6 (pid: 16111)  (SIGABRT)", "  error_file: <N/A>",
        "  traceback : Signal 6 (SIGABRT) received by PID 16111", "=" * 20])
    reason = torchrun.explain(tmp_path, {"agent-n1": log})
    assert reason == "worker rank 1 killed by SIGABRT: terminate called without an active exception"


def test_a_process_killed_by_a_signal_is_explained_with_its_log(tmp_path):
    from dlbench.launch.group import explain_errors

    logs = {"w0": "loading\nterminate called after throwing an instance of 'gloo::IoException'\n", "w1": "fine\n"}
    assert explain_errors(tmp_path, logs, {"w0": -6, "w1": 0}) == \
        "w0 killed by SIGABRT (terminate called after throwing an instance of 'gloo::IoException')"
    assert explain_errors(tmp_path, {"w0": "ValueError: bad\n"}, {"w0": 1}) == "ValueError: bad"


def test_the_killed_rank_leads_the_reason_even_when_torchrun_saw_its_peer_fail_first(tmp_path):
    """When a surviving rank exits faster than torchrun notices the killed one, torchrun's "root
    cause" is the survivor; the reason named only it and lost the SIGKILL."""
    from dlbench.launch import torchrun

    entry = "[{i}]:\n  rank      : {r} (local_rank: {r})\n  exitcode  : {c} (pid: 1)\n  error_file: <N/A>\n" \
            "  traceback : {tb}\n"
    log = ("E1123 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: python\n"
           "Traceback (most recent call last):\nChildFailedError: \nFailures:\n"
           + entry.format(i=1, r=1, c=-9, tb="Signal 9 (SIGKILL) received by PID 2")
           + "Root Cause (first observed failure):\n"
           + entry.format(i=0, r=0, c=1, tb="To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"))
    assert torchrun.explain(tmp_path, {"agent-local": log}) == \
        "worker rank 1 killed by SIGKILL; worker rank 0 exited with code 1"


def test_a_frameworks_data_parallel_worker_is_its_folders_and_a_pinned_release_has_none():
    """The worker module is read from the framework's declaration (WORKERS, a table keyed by name, went);
    a pinned release's workers would start in this Python, not its environment, so it has none, and a
    framework without a dp_worker part says which have one."""
    from dlbench.distributed import scaling

    assert scaling.worker_module("torch") == "dlbench.frameworks.torch.dp_worker"
    assert scaling.worker_module("tensorflow") == "dlbench.frameworks.tensorflow.dp_worker"
    for name in ("jax==0.4.38", "mxnet", "nosuchfw"):
        with pytest.raises(scaling._Unsupported, match=r"no data-parallel worker .*\(written: jax, tensorflow, torch\)"):
            scaling.worker_module(name)
