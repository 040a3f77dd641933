"""Data-parallel PyTorch jobs under torchrun (``python -m torch.distributed.run``): one agent per node.

A node is where one torchrun agent runs: this machine (loopback), a network namespace made by
``dlbench cluster up`` (the agent's command is prefixed with ``ip netns exec``), or, with
``--launcher torchrun --nnodes N``, this machine as one of N real machines meeting at a c10d
rendezvous endpoint. Agents meet at the c10d rendezvous (``--rdzv-backend c10d``); the process
handling, deadline and clean-up are :mod:`dlbench.launch.group`'s.
"""

from __future__ import annotations

import random
import re
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.core.job import Job
from dlbench.launch.group import GroupOutcome, Proc, exit_reason, explain_errors, killed_by, last_error_line, run_group
from dlbench.launch.subprocess import thread_env


@dataclass
class Node:
    """One torchrun agent: the command prefix that places it (``ip netns exec NS``), extra
    environment (the interface gloo must use, the first core for its workers), its address."""

    nproc: int
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    local_addr: str | None = None
    node_rank: int = 0
    name: str = "local"
    #: extra c10d rendezvous settings, e.g. ``is_host`` for the agent that hosts the store
    rdzv_conf: dict[str, str] = field(default_factory=dict)


def free_port(host: str = "127.0.0.1") -> int:
    """A free port for a rendezvous store, *below* the kernel's ephemeral range: a port from that range
    (what binding port 0 gives) can be taken by a client that retries connecting to it before the store
    listens (TCP self-connect), and then the store cannot bind. Two agents sharing a host failed that way
    about 1 run in 8 here."""
    low = 32768
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # fall back to any free port
        s.bind((host, 0))
        return int(s.getsockname()[1])


def torchrun_argv(module: str, args: list[str], node: Node, nnodes: int, endpoint: str, rdzv_id: str,
                  join_timeout_s: float) -> list[str]:
    conf = {"join_timeout": str(int(join_timeout_s)), **node.rdzv_conf}
    argv = [*node.prefix, sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--nproc-per-node", str(node.nproc), "--node-rank", str(node.node_rank), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
            "--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items()),
            "--max-restarts", "0", "--monitor-interval", "0.5"]
    if node.local_addr:
        argv += ["--local-addr", node.local_addr]
    return [*argv, "-m", module, *args]


def run_agents(module: str, job: Job, job_dir: Path, nodes: list[Node], nnodes: int, endpoint: str,
               rdzv_id: str, timeout_s: float, threads: int | None) -> GroupOutcome:
    """One torchrun agent per entry of ``nodes`` (all on this machine; ``nnodes`` counts every
    machine's), under ``timeout_s``; the result is ``job_dir/result.json``."""
    job_path = job_dir / "job.json"
    procs = [Proc(f"agent-{n.name}", torchrun_argv(module, [str(job_path), str(job_dir)], n, nnodes, endpoint,
                                                    rdzv_id, timeout_s), n.env) for n in nodes]
    return run_group(procs, job, job_dir, timeout_s, thread_env(threads), explain=explain)


_ENTRY = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+).*?traceback\s*:\s*([^\n]+)", re.S)


def explain(job_dir: Path, logs: dict[str, str], codes: dict[str, int | None] | None = None) -> str:
    """Why a job failed, from torchrun's report of every failed rank: those killed by a signal first
    (the cause; an abort with what the runtime printed before it), then those that exited with an
    error (often what they saw of a dead peer), then each rank's own error file."""
    killed: list[str] = []
    exited: list[str] = []
    for text in logs.values():
        report = text.find("Failures:")
        report = report if report >= 0 else text.find("Root Cause")
        if report < 0:
            continue
        own = text.find("failed (exitcode")  # torchrun's own lines start here
        before = text[:own if 0 <= own < report else report]
        for m in _ENTRY.finditer(text, report):
            rank, code, tb = m.group(1), int(m.group(2)), m.group(3).strip()
            sig, what = killed_by(code), f"worker rank {rank} {exit_reason(code)}"
            if sig:
                words = "" if sig == signal.SIGKILL else last_error_line(before)
                killed.append(what + (f": {words}" if words else ""))
            else:
                useful = not (tb.startswith(("Signal", "To enable traceback")) or tb == "<N/A>")
                exited.append(what + (f": {tb}" if useful else ""))
    parts = killed + exited
    others = explain_errors(job_dir, logs if not parts else {})
    return "; ".join(dict.fromkeys([*parts, *filter(None, [others])]))
