"""How close is ``--dry-run``'s estimate to the run's wall time? (issue 45: within +-30%, cold and warm, with
and without an environment to build, on the quick suite and one transformer grid)

Each workload runs three times in turn, ``--dry-run`` asked before each run:

* ``cold``: an empty database (no history of this machine: the estimate rests on the calibration,
  :mod:`dlbench.planning.calibration`, which it makes or finds);
* ``warm``: the same database, now holding the cold run (a user's second run);
* ``env``: that database again, with a release of JAX whose environment is not built (:data:`ENV_PIN`,
  removed first), so the run builds it (from the package cache uv keeps, as a second machine of a user's
  would not: the estimate says so).

``--fresh-calibration`` drops this machine's kept calibration first, so the cold estimate pays for making it
(its seconds are in the dry run's own time, shown beside). ``--workdir DIR`` keeps the databases and each
finished row (``rows.jsonl``), so an interrupted study resumes. Run it on a quiet machine: it measures wall
time.

    python benchmarks/estimate_accuracy.py --workdir DIR
    python benchmarks/estimate_accuracy.py --only quick --states cold,warm
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import dlbench, header

ENV_PIN = "jax==0.4.36"
WORKLOADS: dict[str, list[str]] = {
    "quick": ["--suite", "quick"],
    "transformers": ["--model", "bert-base,gpt2", "--framework", "torch,jax,onnxruntime", "--scenario",
                     "forward,train_step", "--threads", "2", "--batch", "1", "--repeats", "2", "--warmup", "1",
                     "--min-iters", "3", "--min-time", "0"],
}
STATES = ("cold", "warm", "env")
BOUND = 0.30


def _frameworks(argv: list[str], db: str) -> list[str]:
    dry = json.loads(dlbench("run", *argv, "--dry-run", "--json", "--db", db).stdout)
    return list(dict.fromkeys(c["framework"] for c in dry["cells"]))


def one(argv: list[str], db: str, state: str) -> dict:
    """``--dry-run``, then the run: the estimate, the dry run's own seconds and the run's wall time."""
    if state == "env":
        dlbench("envs", "remove", ENV_PIN)
        argv = _replace_frameworks(argv, [f for f in _frameworks(argv, db) if "==" not in f] + [ENV_PIN])
    t0 = time.perf_counter()
    dry = dlbench("run", *argv, "--dry-run", "--json", "--db", db)
    dry_s = time.perf_counter() - t0
    if dry.returncode:
        raise SystemExit(f"--dry-run failed: {dry.stderr[-2000:]}")
    estimate = json.loads(dry.stdout)["estimate_s"]
    t0 = time.perf_counter()
    run = dlbench("run", *argv, "--json", "--db", db)
    seconds = time.perf_counter() - t0
    summary = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {}
    return {"estimate_s": estimate, "dry_s": dry_s, "seconds": seconds, "exit": run.returncode,
            "cells": len(json.loads(dry.stdout)["cells"]),
            "failed": sum(c["status"] != "unsupported" for c in summary.get("failed", []))}


def _replace_frameworks(argv: list[str], frameworks: list[str]) -> list[str]:
    out = list(argv)
    if "--framework" in out:
        i = out.index("--framework")
        out[i + 1] = ",".join(frameworks)
    else:
        out += ["--framework", ",".join(frameworks)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(WORKLOADS), action="append", help="workloads (default: both)")
    ap.add_argument("--states", default=",".join(STATES), help=f"of {', '.join(STATES)} (default: all, in turn)")
    ap.add_argument("--fresh-calibration", action="store_true", help="drop this machine's calibration first")
    ap.add_argument("--workdir", type=Path, help="keep the databases here (default: a temporary folder)")
    args = ap.parse_args()
    states = [s for s in args.states.split(",") if s]
    bad = [s for s in states if s not in STATES]
    if bad:
        raise SystemExit(f"unknown state {bad[0]!r}; known: {', '.join(STATES)}")
    title = header("`--dry-run`'s estimate against the run's wall time")
    if args.fresh_calibration:
        from dlbench.planning.calibration import forget

        forget()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dlbench-estimate-"))
    work.mkdir(parents=True, exist_ok=True)
    done_file = work / "rows.jsonl"  # each finished (workload, state): an interrupted study resumes after it
    done = {(r["workload"], r["state"]): r for r in map(json.loads, done_file.read_text().splitlines())} \
        if done_file.exists() else {}
    rows = []
    for name in args.only or list(WORKLOADS):
        db = str(work / f"{name}.db")
        for state in states:
            if (name, state) not in done:
                if state == "cold":
                    Path(db).unlink(missing_ok=True)
                done[(name, state)] = {"workload": name, "state": state, **one(WORKLOADS[name], db, state)}
                with done_file.open("a") as f:
                    f.write(json.dumps(done[(name, state)]) + "\n")
                print(f"{name} {state}: {json.dumps(done[(name, state)])}", file=sys.stderr, flush=True)
            rows.append((name, state, done[(name, state)]))
    print(title)
    print("Each workload in turn: `cold` an empty database, `warm` the database holding the cold run, `env` "
          f"that database with {ENV_PIN} to build (its environment removed first; the package caches kept). "
          f"Ratio: the estimate over the wall time (the goal: within {BOUND:.0%}).\n")
    print("| workload | state | `--dry-run`'s estimate | its own time | the run's wall time | ratio | cells |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, state, r in rows:
        ratio = r["estimate_s"] / r["seconds"]
        flag = "" if abs(ratio - 1) <= BOUND else " (outside)"
        cells = f"{r['cells']} ({r['failed']} failed)" if r.get("failed") else str(r.get("cells", "–"))
        print(f"| {name} | {state} | {r['estimate_s'] / 60:.2f} min | {r['dry_s']:.1f} s | {r['seconds'] / 60:.2f} min "
              f"| {ratio:.2f}x{flag} | {cells} |")


if __name__ == "__main__":
    main()
