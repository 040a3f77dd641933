"""How close is ``--dry-run``'s estimate of an environment build to the build? (issue 45: environment builds
estimated from the sizes of the packages they install)

For each pinned release in turn (default: :data:`PINS`): its environment is removed, then ``dlbench run
--framework PIN --dry-run --json`` is asked twice, with the packages' sizes (the estimate,
:func:`dlbench.frameworks.ondemand.estimate_builds`) and with ``DLBENCH_PACKAGE_SIZES=off`` (the median
build of this host, the estimate before), then ``dlbench envs create PIN`` builds it, timed. The releases
run in order, so each estimate learns from the builds before it: the first has no build that recorded its
bytes (the median, both ways), the next ones do. ``--workdir DIR`` keeps each finished row (``rows.jsonl``)
so an interrupted study resumes. Run it on a quiet machine: it measures wall time (and downloads).

    python benchmarks/build_estimate.py --workdir DIR
    python benchmarks/build_estimate.py --pins jax==0.5.0,tensorflow==2.18.0
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import dlbench, header

PINS = ["jax==0.4.36", "jax==0.5.0", "tensorflow==2.18.0"]
BOUND = 0.30


def _estimate(pin: str, sizes: bool, db: Path) -> dict:
    argv = ["run", "--framework", pin, "--model", "lenet", "--scenario", "forward", "--batch", "1", "--threads", "1",
            "--dry-run", "--json", "--db", str(db)]
    t0 = time.perf_counter()
    done = dlbench(*argv, env={"DLBENCH_PACKAGE_SIZES": "on" if sizes else "off"})
    if done.returncode:
        raise SystemExit(f"--dry-run for {pin} failed: {done.stderr[-2000:]}")
    (build,) = [b for b in json.loads(done.stdout)["environments_to_build"] if b["framework"] == pin]
    return {**build, "dry_s": time.perf_counter() - t0}


def one(pin: str, work: Path) -> dict:
    dlbench("envs", "remove", pin)
    by_size, by_median = _estimate(pin, True, work / "dry.db"), _estimate(pin, False, work / "dry.db")
    t0 = time.perf_counter()
    built = dlbench("envs", "create", pin)
    wall = time.perf_counter() - t0
    if built.returncode:
        raise SystemExit(f"building {pin} failed: {built.stderr[-2000:]}")
    listed = json.loads(dlbench("envs", "list", "--json").stdout)
    (record,) = [r for r in listed["envs"] if r["framework"] == pin]
    return {"pin": pin, "estimate_s": by_size["seconds"], "basis": by_size["basis"],
            "fetch_bytes": by_size.get("fetch_bytes"), "network_bytes": by_size.get("network_bytes"),
            "dry_s": by_size["dry_s"], "median_s": by_median["seconds"], "build_s": record["create_seconds"],
            "wall_s": wall, "wheel_bytes": record.get("wheel_bytes", 0)}


def _ratio(estimate: float | None, actual: float) -> str:
    if estimate is None:
        return "none"
    r = estimate / actual
    return f"{r:.2f}x" + ("" if abs(r - 1) <= BOUND else " (outside)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pins", default=",".join(PINS), help=f"releases, in order (default: {','.join(PINS)})")
    ap.add_argument("--workdir", type=Path, help="keep the finished rows here (default: a temporary folder)")
    args = ap.parse_args()
    title = header("An environment build's estimate against the build")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dlbench-build-estimate-"))
    work.mkdir(parents=True, exist_ok=True)
    done_file = work / "rows.jsonl"
    done = {r["pin"]: r for r in map(json.loads, done_file.read_text().splitlines())} if done_file.exists() else {}
    rows = []
    for pin in [p for p in args.pins.split(",") if p]:
        if pin not in done:
            done[pin] = one(pin, work)
            with done_file.open("a") as f:
                f.write(json.dumps(done[pin]) + "\n")
            print(f"{pin}: {json.dumps(done[pin])}", file=sys.stderr, flush=True)
        rows.append(done[pin])
    print(title)
    print("Each release in turn: its environment removed, the dry run's estimate of its build asked with the "
          "packages' sizes and without (the median build here), then the build (`dlbench envs create`; pip's "
          f"own cache kept). Ratio: the estimate over the build's time (the goal: within {BOUND:.0%}).\n")
    print("| release | packages (over the network) | estimate by size | ratio | median build | ratio | build | "
          "estimate's basis |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        fetch = "–" if r["fetch_bytes"] is None else \
            f"{r['fetch_bytes'] / 2**20:.0f} MiB ({r['network_bytes'] / 2**20:.0f} MiB)"
        est = "–" if r["estimate_s"] is None else f"{r['estimate_s']:.0f} s"
        med = "–" if r["median_s"] is None else f"{r['median_s']:.0f} s"
        print(f"| {r['pin']} | {fetch} | {est} | {_ratio(r['estimate_s'], r['build_s'])} | {med} | "
              f"{_ratio(r['median_s'], r['build_s'])} | {r['build_s']:.0f} s | {r['basis']} |")


if __name__ == "__main__":
    main()
