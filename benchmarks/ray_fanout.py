"""Does `--launcher ray` spread cells over a cluster's nodes? (issue 15: beyond one machine)

The same 4-cell run twice through Ray on this machine, each "node" a `ray start` pinned to its own
half of the cores and offering one `dlbench_node`: first with the head alone (one dlbench node: the
cells run one at a time), then with a second node joined (the cells fan out, one per node). Both
runs measure their own peak and equivalence gate, which do not fan out; the wall time of the cells
alone (first cell started to last stored) is reported beside the run's. Ideal cells ratio: 2.

Prints a Markdown block for docs/performance.md. Needs Ray (`pip install 'dlbench[distributed]'`)
and torch; uses no Ray already running here (its nodes get their own temp directory and port, and
are stopped by signalling their sessions, never `ray stop`).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import header

SRC = Path(__file__).resolve().parents[1] / "src"
TINY = {"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1}


def start_node(args: list[str], temp: str, cores: set[int]) -> subprocess.Popen:
    ray_bin = str(Path(sys.executable).with_name("ray"))
    return subprocess.Popen([ray_bin, "start", *args, f"--num-cpus={len(cores)}", '--resources={"dlbench_node": 1}',
                             "--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, cores),
                            env={**os.environ, "PYTHONPATH": str(SRC)})


def session_pids(sid: int) -> list[int]:
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


def stop_nodes(nodes: list[subprocess.Popen]) -> None:
    for node in nodes:
        os.killpg(node.pid, signal.SIGTERM)
    deadline = time.time() + 30
    while any(session_pids(n.pid) for n in nodes) and time.time() < deadline:
        time.sleep(0.5)
    for node in nodes:
        for pid in session_pids(node.pid):
            os.kill(pid, signal.SIGKILL)


def wait_for(address: str, nodes: int) -> None:
    ray_bin = str(Path(sys.executable).with_name("ray"))
    deadline = time.time() + 120
    while time.time() < deadline:
        out = subprocess.run([ray_bin, "status", f"--address={address}"], capture_output=True, text=True)
        if f"/{nodes}.0 dlbench_node" in out.stdout:
            return
        time.sleep(1)
    raise SystemExit(f"the Ray cluster at {address} never had {nodes} dlbench node(s)")


def timed_run(address: str, db: Path, kw: dict) -> tuple[float, float, Counter]:
    """Wall time of the run and of its cells (first cell started to last stored), and the statuses."""
    from dlbench import api

    marks: list[float] = []

    def progress(event: str, **_) -> None:
        if event in ("cell_start", "cell_done"):
            marks.append(time.perf_counter())

    t0 = time.perf_counter()
    res = api.run(db=db, distributed={"launcher": "ray", "ray_address": address}, progress=progress, **kw)
    wall = time.perf_counter() - t0
    return wall, marks[-1] - marks[0], Counter(c.cell.status for c in res.cells)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--scenarios", default="forward,train_step")
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--tiny", action="store_true", help="a tiny protocol (to check the script, not for the docs)")
    args = ap.parse_args()
    sys.path.insert(0, str(SRC))
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.pop("DLBENCH_PEAK_CACHE", None)  # each run measures its peak through Ray
    kw = {"models": [args.model], "frameworks": ["torch"], "scenarios": args.scenarios.split(","),
          "batches": [int(b) for b in args.batches.split(",")], "threads": [1]}
    if args.tiny:
        kw["protocol"] = TINY
    cores = sorted(os.sched_getaffinity(0))
    halves = [set(cores[: max(1, len(cores) // 2)]), set(cores[len(cores) // 2:]) or set(cores)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address, temp = f"127.0.0.1:{port}", tempfile.mkdtemp(prefix="dlb-ray-bench-")
    title = header("`--launcher ray`: cells one at a time vs fanned out over 2 local nodes")
    nodes = [start_node(["--head", f"--port={port}", "--include-dashboard=false"], temp, halves[0])]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wait_for(address, 1)
            one = timed_run(address, Path(tmp) / "one.db", kw)
            nodes.append(start_node([f"--address={address}"], temp, halves[1]))
            wait_for(address, 2)
            fan = timed_run(address, Path(tmp) / "fan.db", kw)
    finally:
        stop_nodes(nodes)
    cells = sum(one[2].values())
    print(title)
    print(f"- cells: {cells} (torch {args.model}: {', '.join(kw['scenarios'])} x batch {args.batches}, 1 thread, "
          f"{'tiny' if args.tiny else 'default'} protocol)")
    print(f"- nodes: `ray start` on 127.0.0.1 with `--resources '{{\"dlbench_node\": 1}}'`, cores "
          f"{sorted(halves[0])} and {sorted(halves[1])}")
    for name, (wall, span, statuses) in (("one at a time (head only)", one), ("fanned out (2 nodes)", fan)):
        print(f"- {name}: run {wall:.1f} s, cells {span:.1f} s "
              f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))})")
    print(f"- ratio one at a time / fanned out: run **{one[0] / fan[0]:.2f}**, cells **{one[1] / fan[1]:.2f}** "
          "(ideal for the cells: 2; the peak, the gate and Ray's start-up do not fan out)")


if __name__ == "__main__":
    main()
