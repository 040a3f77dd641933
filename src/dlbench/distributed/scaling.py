"""The ``scaling`` scenario on the runner's side: turn a cell into a distributed job, launch it
where the run says (loopback, network namespaces, several machines, a Ray cluster), and turn the
job's per-rank timings into the store's samples and metrics.

A :class:`Session` spans the run: it brings a namespace cluster up for ``--cluster`` when none is
up (and takes it down at the end, on error and on Ctrl-C or SIGTERM too: the runner turns both
into KeyboardInterrupt for every run, see dlbench.core.interrupt), or records the loopback fallback
when namespaces cannot be made here; with ``--launcher ray`` it hands each cell to the run's Ray
launcher.

Samples of a scaling cell (raw, per step, in ns): ``warmup`` and ``measure`` (the synchronous
step, max over ranks), ``compute`` (the step without exchange, max over ranks) and ``comm``
(time inside the gradient exchange, mean over ranks). Parameter-server cells store per-step
worker times the same way and their staleness in the metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlbench import frameworks
from dlbench.core.cell import Cell
from dlbench.core.errors import UsageError
from dlbench.core.job import DataParallelJob, FaultAt, ParameterServerJob
from dlbench.distributed import cluster as netns
from dlbench.distributed import linkprobe
from dlbench.frameworks.data_parallel import combine_ranks, oversubscribed
from dlbench.launch.group import GroupOutcome, Proc, run_group
from dlbench.launch.subprocess import thread_env
from dlbench.launch.torchrun import Node, free_port, run_agents
from dlbench.storage.cell_result import CellOutcome
from dlbench.storage.store import Sample

if TYPE_CHECKING:
    from dlbench.core.suite_view import SuiteView  # the suite model (pydantic) is the parent's; annotations only

#: the exchanges a parameter server runs (its driver's job: :class:`~dlbench.core.job.ParameterServerJob`)
PS_EXCHANGES = ("ps-sync", "ps-async")


class Network:
    """Where the workers of a cell talk: loopback, the namespaces of a cluster, or real machines."""

    def __init__(self, kind: str = "loopback", state: netns.ClusterState | None = None, fallback: str = ""):
        self.kind, self.state, self.fallback = kind, state, fallback
        self.probe: dict[str, float] | None = None

    def measure_link(self) -> None:
        """TCP latency and bandwidth between two worker places (what the scaling model uses)."""
        if self.kind == "netns" and self.state is not None and len(self.state.nodes) >= 2:
            a, b = self.state.nodes[0], self.state.nodes[1]
            rate = self.state.bandwidth_bps or 8e9
            nbytes = int(min(64 << 20, max(4 << 20, rate / 8 * 0.5)))
            self.probe = linkprobe.measure(a.addr, 29399, nbytes, ["ip", "netns", "exec", a.ns],
                                           ["ip", "netns", "exec", b.ns])
        elif self.kind == "loopback":
            self.probe = linkprobe.measure("127.0.0.1", free_port(), 64 << 20)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.state is not None:
            d.update(description=self.state.describe(), bandwidth_bps=self.state.bandwidth_bps,
                     latency_s=self.state.latency_s, bridge=self.state.bridge)
        if self.fallback:
            d["fallback"] = self.fallback
        if self.probe:
            d["probe"] = self.probe
        return d


class Session:
    """Run-scoped resources of the scaling scenario (a context manager)."""

    def __init__(self, suite: SuiteView, cells: list[Cell], ray=None, progress=None):
        self.suite, self.cells, self.ray, self.progress = suite, cells, ray, progress
        self.network = Network()
        self.owned_cluster = False

    def __enter__(self) -> Session:
        scaling = self.cells  # the scaling scenario's cells (its session)
        try:
            if any(c.cluster == "netns" for c in scaling):
                self._cluster(max(c.workers for c in scaling))
            if any(c.workers > 1 and c.launcher == "subprocess" for c in scaling):
                if self.progress:
                    self.progress("phase", text="measuring the link between workers")
                self.network.measure_link()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _cluster(self, workers: int) -> None:
        d = self.suite.settings("distributed")
        state = netns.load_state()
        if state is None:
            why = netns.unavailable()
            if why:
                msg = f"--cluster: cannot create network namespaces ({why}); scaling cells run over loopback"
                print(f"dlbench: {msg}", file=sys.stderr)
                self.network = Network("loopback", fallback=why)
                return
            try:
                state = netns.up(workers, d.bandwidth or None, d.latency or None)
            except netns.ClusterError as exc:
                raise UsageError(str(exc)) from None
            self.owned_cluster = True
        self.network = Network("netns", state)

    def __exit__(self, *exc) -> None:
        if self.owned_cluster:
            netns.down()
            self.owned_cluster = False

    def measure(self, cell: Cell) -> CellOutcome:
        if self.ray is not None:
            return self.ray.measure_scaling(cell, self.suite)
        return measure_cell(cell, self.suite, self.network)


# --- one cell ---------------------------------------------------------------------------------------
def _job(cell: Cell, suite: SuiteView) -> DataParallelJob | ParameterServerJob:
    """The typed job every process of one repeat of the cell reads: the parameter server's driver's, or
    each data-parallel worker's."""
    protocol = suite.protocol.timer_fields()
    if cell.exchange in PS_EXCHANGES:
        return ParameterServerJob(threads=cell.threads, cell=cell, seed=suite.seed, protocol=protocol,
                                  ps_shards=suite.settings("distributed").ps_shards)
    fault = None
    if os.environ.get("DLBENCH_FAULT"):  # tests: {"rank": r, "step": k} kills rank r at step k
        fault = FaultAt(**json.loads(os.environ["DLBENCH_FAULT"]))
    return DataParallelJob(threads=cell.threads, cell=cell, seed=suite.seed, protocol=protocol,
                           collective_timeout_s=max(10.0, min(suite.protocol.timeout_s / 2, 300.0)), fault=fault)


def _rdzv_id(cell: Cell, repeat: int) -> str:
    return "dlbench-" + hashlib.sha1(cell.key.encode()).hexdigest()[:12] + f"-r{repeat}"


def worker_module(framework: str) -> str:
    """The module each data-parallel worker of ``framework`` runs: its folder's ``dp_worker``. A pinned
    release (``jax==0.4.38``) has none: its workers would start in this Python, not its environment."""
    module = frameworks.part_module(framework, "dp_worker")
    if module is None or frameworks.framework_info(framework).version is not None:
        raise _Unsupported(f"no data-parallel worker for {framework} "
                           f"(written: {', '.join(sorted(frameworks.with_part('dp_worker')))})")
    return module


def launch(cell: Cell, suite: SuiteView, network: Network, job_dir: Path, repeat: int) -> GroupOutcome:
    """One repeat of a cell: the processes it needs, on the network the run uses."""
    job = _job(cell, suite)
    timeout = suite.protocol.timeout_s
    if cell.exchange in PS_EXCHANGES:
        if frameworks.part_module(cell.framework, "parameter_server") is None:
            raise _Unsupported(f"no parameter-server worker for {cell.framework} "
                               f"(written: {', '.join(frameworks.with_part('parameter_server'))})")
        argv = [sys.executable, "-m", "dlbench.distributed.ps", str(job_dir / "job.json"), str(job_dir)]
        return run_group([Proc("ps-driver", argv)], job, job_dir, timeout, thread_env(cell.threads))
    module = worker_module(cell.framework)
    d = suite.settings("distributed")
    if frameworks.framework_info(cell.framework).dp_launcher != "torchrun":
        return _launch_plain(module, job, cell, network, job_dir, timeout)
    if d.launcher == "torchrun" and d.nnodes > 1:
        if cell.workers % d.nnodes:
            raise _Unsupported(f"{cell.workers} workers do not split over {d.nnodes} nodes")
        # node 0 owns the endpoint (docs/distributed.md) and hosts the c10d store; said explicitly, because
        # torch guesses it from the endpoint's address, and two agents sharing a host both guessed "host"
        # and raced for the store (RendezvousConnectionError, once in CI and 1 in 4 runs here)
        node = Node(cell.workers // d.nnodes, node_rank=d.node_rank, name=f"node{d.node_rank}",
                    rdzv_conf={"is_host": "1" if d.node_rank == 0 else "0"})
        return run_agents(module, job, job_dir, [node], d.nnodes, d.rdzv_endpoint, _rdzv_id(cell, repeat), timeout,
                          cell.threads)
    if network.kind == "netns" and network.state is not None:
        nodes = [Node(1, prefix=["ip", "netns", "exec", n.ns], local_addr=n.addr, node_rank=i, name=n.ns,
                      env={"GLOO_SOCKET_IFNAME": n.ns_if, "DLBENCH_IFACE": n.ns_if, "DLBENCH_CORE_OFFSET": str(i),
                           "DLBENCH_NODE_ADDR": n.addr},
                      rdzv_conf={"is_host": "1" if i == 0 else "0"})
                 for i, n in enumerate(netns.cell_nodes(network.state, cell.workers))]
        endpoint = f"{nodes[0].local_addr}:{29400 + repeat % 100}"
        return run_agents(module, job, job_dir, nodes, len(nodes), endpoint, _rdzv_id(cell, repeat), timeout,
                          cell.threads)
    endpoint = f"127.0.0.1:{free_port()}"
    return run_agents(module, job, job_dir, [Node(cell.workers, local_addr="127.0.0.1")], 1, endpoint,
                      _rdzv_id(cell, repeat), timeout, cell.threads)


def _launch_plain(module: str, job: DataParallelJob, cell: Cell, network: Network, job_dir: Path,
                  timeout: float) -> GroupOutcome:
    """JAX and TensorFlow: W plain processes that find each other through a coordinator address
    (``jax.distributed.initialize``) or ``TF_CONFIG``; one per namespace with ``--cluster``."""
    nodes = netns.cell_nodes(network.state, cell.workers) if network.kind == "netns" and network.state else None
    addrs = [n.addr for n in nodes] if nodes else ["127.0.0.1"] * cell.workers
    ports = [free_port() for _ in range(cell.workers)] if not nodes else [29500 + i for i in range(cell.workers)]
    procs = []
    for rank in range(cell.workers):
        prefix = ["ip", "netns", "exec", nodes[rank].ns] if nodes else []
        env = {"DLBENCH_RANK": str(rank), "DLBENCH_WORLD": str(cell.workers), "DLBENCH_CORE_OFFSET": str(rank),
               "DLBENCH_ADDRS": ",".join(f"{a}:{p}" for a, p in zip(addrs, ports, strict=True))}
        if nodes:
            env.update(DLBENCH_IFACE=nodes[rank].ns_if, DLBENCH_NODE_ADDR=nodes[rank].addr)
        procs.append(Proc(f"rank{rank}", [*prefix, sys.executable, "-m", module, str(job_dir / "job.json"),
                                          str(job_dir)], env))
    return run_group(procs, job, job_dir, timeout, thread_env(cell.threads))


class _Unsupported(Exception):
    pass


def measure_cell(cell: Cell, suite: SuiteView, network: Network) -> CellOutcome:
    """R repeats of the cell, each a fresh set of processes; samples and metrics for the store."""
    out = CellOutcome("ok")
    results: list[dict[str, Any]] = []
    leftovers: list[int] = []
    for r in range(suite.protocol.repeats):
        with tempfile.TemporaryDirectory(prefix="dlbench-dist-") as tmp:
            try:
                o = launch(cell, suite, network, Path(tmp), r)
            except _Unsupported as exc:
                return CellOutcome("unsupported", str(exc))
            except netns.ClusterError as exc:
                return CellOutcome("failed", str(exc))
        out.seconds += o.seconds
        leftovers += o.leftovers
        if o.leftovers:
            out.warnings.append(f"repeat {r}: processes still alive after clean-up: {o.leftovers}")
        if o.status != "ok":
            out.status, out.reason = o.status, o.reason
            out.metrics = {"network": network.describe(), "leftover_pids": o.leftovers, "workers": cell.workers,
                           "job_pids": o.pids}
            return out
        res = o.result or {}
        if "unsupported" in res:
            return CellOutcome("unsupported", res["unsupported"], seconds=out.seconds)
        out.samples += samples_of(res, r)
        results.append(res)
    out.metrics = {**metrics_of(cell, results, network), "leftover_pids": leftovers}
    if network.fallback:
        out.warnings.append(f"--cluster fell back to loopback: {network.fallback}")
    warn = oversubscribed(cell.workers if network.kind == "loopback" else 1, cell.threads)
    if warn and network.kind != "netns":
        out.warnings.append(warn)
    elif network.kind == "netns":
        warn = oversubscribed(cell.workers, cell.threads)
        if warn:
            out.warnings.append(warn + " (namespaces share this machine's cores)")
    if not out.metrics.get("params_identical", True):
        out.status, out.reason = "failed", "workers ended with different parameters: " + \
            ", ".join(sorted(set(out.metrics.get("digests", []))))[:200]
    return out


def samples_of(res: dict[str, Any], repeat: int) -> list[Sample]:
    if "per_rank" in res:
        per = combine_ranks(res["per_rank"])
    else:  # parameter server: the driver already combined them
        per = {k: res.get(k, []) for k in ("warmup_ns", "step_ns", "comm_ns", "compute_ns")}
    out = [Sample(repeat, i, "warmup", v) for i, v in enumerate(per["warmup_ns"])]
    out += [Sample(repeat, i, "measure", v) for i, v in enumerate(per["step_ns"])]
    out += [Sample(repeat, i, "comm", v) for i, v in enumerate(per["comm_ns"])]
    out += [Sample(repeat, i, "compute", v) for i, v in enumerate(per["compute_ns"])]
    return out


def metrics_of(cell: Cell, results: list[dict[str, Any]], network: Network) -> dict[str, Any]:
    first = results[0]
    m: dict[str, Any] = {
        "workers": cell.workers, "scaling": cell.scaling, "exchange": cell.exchange or "allreduce",
        "launcher": cell.launcher, "cluster": cell.cluster, "per_worker_batch": cell.per_worker_batch,
        "global_batch": cell.global_batch, "grad_bytes": first.get("grad_bytes"),
        "param_count": first.get("param_count"), "network": network.describe(), "repeats_done": len(results),
        "versions": first.get("versions"), "comm_method": first.get("comm_method"),
        "compute_method": first.get("compute_method"), "dist_backend": first.get("dist_backend"),
    }
    if "per_rank" in first:
        ranks = [r for res in results for r in res["per_rank"]]
        payload = [b for r in ranks for b in r.get("payload_bytes", [])]
        m["payload_bytes_per_step"] = float(np.median(payload)) if payload else None
        w = cell.workers
        if m["payload_bytes_per_step"] is not None:
            m["ring_wire_bytes_per_worker"] = 2 * (w - 1) / w * m["payload_bytes_per_step"]
        iface = [r["iface_bytes"] / r["steps"] for r in ranks if r.get("iface_bytes") is not None and r.get("steps")]
        m["iface_bytes_per_step_per_worker"] = float(np.mean(iface)) if iface else None
        m["nnodes"], m["procs_per_node"] = first.get("nnodes"), first.get("local_world")
        digests = [r["digest"] for res in results for r in res["per_rank"]]
        per_repeat_same = [len({r["digest"] for r in res["per_rank"]}) == 1 for res in results]
        m["params_identical"] = all(per_repeat_same)
        m["digests"] = sorted(set(digests))
        m["cores"] = {str(r["rank"]): r.get("cores") for r in first["per_rank"]}
        m["threads_readback"] = first["per_rank"][0].get("threads_readback")
        m["final_loss"] = [r.get("final_loss") for r in first["per_rank"]]
    else:
        for k in ("staleness", "samples_per_s_wall", "updates", "ps_shards", "shard_bytes", "mode", "pull_bytes_per_step",
                  "push_bytes_per_step"):
            if k in first:
                m[k] = first[k]
        if len(results) > 1 and "staleness" in first:
            m["staleness_per_repeat"] = [res["staleness"] for res in results]
    return m
