"""Where the between-process variance comes from, and what lowers it (issue #35; docs/measurement.md).

One cell (default: lenet's train_step on torch, 1 thread) measured in many fresh processes under each
remedy, the remedies interleaved in rounds (A B C ..., then reversed) so the machine's drift falls on
all alike. For each remedy: the between-process share of the variance, the sd of the processes' log
medians (the process-to-process spread, with its 95% chi-square interval) and the cell's median. A
remedy is worth adopting only where its spread's interval lies below the baseline's.

Remedies (each applied to the driver, whose measuring processes inherit it):

* ``baseline``: as dlbench runs today;
* ``aslr-off``: no address-space layout randomisation (``setarch -R``): every process gets the same layout;
* ``malloc``: glibc's allocator held still (one arena, no trimming, a fixed mmap threshold);
* ``hashseed``: ``PYTHONHASHSEED=0`` (dict and set layouts the same in every process);
* ``last-core``: the process pinned to the last core instead of the first (where interrupts land less);
* ``all``: aslr-off + malloc + hashseed.

    python benchmarks/update_performance.py noise_remedies
    python benchmarks/noise_remedies.py --processes 30 --rounds 3 --model lenet --scenario train_step
    python benchmarks/noise_remedies.py --tiny        # checks the script runs; its figures say nothing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, header

sys.path.insert(0, str(ROOT / "src"))  # dlbench's store and statistics, from this checkout

MALLOC = {"MALLOC_ARENA_MAX": "1", "MALLOC_TRIM_THRESHOLD_": "-1", "MALLOC_MMAP_THRESHOLD_": "1048576",
          "MALLOC_TOP_PAD_": "67108864"}


def remedies() -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command prefix, environment) for the driver."""
    setarch = shutil.which("setarch")
    aslr = [setarch, platform.machine(), "-R"] if setarch else None
    cores = sorted(os.sched_getaffinity(0))
    out: dict[str, tuple[list[str], dict[str, str]]] = {"baseline": ([], {})}
    if aslr:
        out["aslr-off"] = (aslr, {})
    out["malloc"] = ([], MALLOC)
    out["hashseed"] = ([], {"PYTHONHASHSEED": "0"})
    if len(cores) > 1 and shutil.which("taskset"):
        out["last-core"] = (["taskset", "-c", str(cores[-1])], {})
    out["all"] = ((aslr or []), {**MALLOC, "PYTHONHASHSEED": "0"})
    return out


def run_once(prefix: list[str], env: dict[str, str], cell: list[str], processes: int, db: Path) -> list[list[float]]:
    """``processes`` fresh processes of the cell; each one's timed calls (ms)."""
    cmd = [*prefix, sys.executable, "-m", "dlbench", "run", *cell, "--repeats", str(processes), "--db", str(db),
           "--json", "--fixed-warmup"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
    run_id = json.loads(out.stdout)["run_id"]
    from dlbench.store import Store

    store = Store(db, read_only=True)
    try:
        (cell_id,) = [c.id for c in store.cells(run_id) if c.status == "ok"]
        by: dict[int, list[float]] = {}
        for s in store.samples(cell_id, "measure"):
            by.setdefault(s.repeat, []).append(s.value_ns / 1e6)
    finally:
        store.close()
    return list(by.values())


def spread(groups: list[list[float]]) -> dict[str, float]:
    """sd of log process medians with its 95% chi-square interval, the between share, the median."""
    from scipy.stats import chi2

    from dlbench.measure.adaptive import variance_split

    logs = [math.log(statistics.median(g)) for g in groups]
    n = len(logs)
    sd = statistics.stdev(logs)
    lo, hi = sd * math.sqrt((n - 1) / chi2.ppf(0.975, n - 1)), sd * math.sqrt((n - 1) / chi2.ppf(0.025, n - 1))
    split = variance_split(groups)
    return {"processes": n, "sd": sd, "sd_low": lo, "sd_high": hi, "between_share": split.get("between_share"),
            "median_ms": statistics.median(v for g in groups for v in g)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--scenario", default="train_step")
    ap.add_argument("--framework", default="torch")
    ap.add_argument("--processes", type=int, default=10, help="fresh processes per remedy per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="3 processes, 1 round, a short protocol")
    args = ap.parse_args()
    head = header("Noise remedies: what lowers the between-process variance" + (" (tiny)" if args.tiny else ""))
    cell = ["--model", args.model, "--framework", args.framework, "--scenario", args.scenario, "--threads", "1"]
    cell += ["--warmup", "2", "--min-iters", "10", "--min-time", "0", "--batch", "4"] if args.tiny else []
    processes, rounds = (3, 1) if args.tiny else (args.processes, args.rounds)
    chosen = remedies()
    groups: dict[str, list[list[float]]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name in chosen if r % 2 == 0 else reversed(list(chosen)):
                prefix, env = chosen[name]
                groups[name] += run_once(prefix, env, cell, processes, Path(tmp) / f"{name}.db")
    print(head)
    print(f"{args.framework} {args.model} {args.scenario}, 1 thread: {processes} fresh processes per remedy in each "
          f"of {rounds} interleaved round(s). Spread: sd of the processes' log medians (about the relative spread), "
          "95% interval.\n")
    print("| remedy | processes | median ms | spread (sd) | 95% interval | between share |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, g in groups.items():
        s = spread(g)
        share = "–" if s["between_share"] is None else f"{100 * s['between_share']:.0f}%"
        print(f"| {name} | {s['processes']} | {s['median_ms']:.3g} | {100 * s['sd']:.2f}% | "
              f"[{100 * s['sd_low']:.2f}%, {100 * s['sd_high']:.2f}%] | {share} |")
    print("\nA remedy lowers the spread only where its interval lies below the baseline's.")


if __name__ == "__main__":
    main()
