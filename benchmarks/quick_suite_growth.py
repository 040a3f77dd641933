"""Does the default quick suite take longer than it did at an earlier commit? (issue #35: "the default quick
suite's wall time does not grow")

Runs ``dlbench run`` (the quick suite, every installed framework) from this checkout and from a git worktree
of ``--base``, alternately, ``--rounds`` times each, each into a scratch database, and reports each run's
wall time and the ratio of the medians. Both use this Python and its frameworks; only dlbench's source
differs. A later round of this checkout may reuse the gate's verdicts its first round kept (measure.reuse):
what a user's second run gets; the earlier commit has no such reuse.

    python benchmarks/update_performance.py quick_suite_growth --args="--base 0d7aba4 --rounds 2"

0d7aba4 (before --target-ci, the found warm-up, the cost breakdown and the gate's reuse) fails today's
environments of MXNet, PyTensor and Paddle at the gate, so its runs measure fewer cells; ``--framework``
names the frameworks both commits measure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import header

ROOT = Path(__file__).resolve().parent.parent


def quick(tree: Path, db: Path, extra: list[str]) -> tuple[float, str]:
    """Seconds of ``dlbench run --json`` with ``tree``'s source, and its cells' statuses (a failed cell is
    shorter than a measured one: the two commits must measure the same cells)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "dlbench", "run", "--suite", "quick", *extra, "--db", str(db), "--json"]
    out = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    try:
        summary = json.loads(out.stdout)
    except json.JSONDecodeError:
        return seconds, f"exit {out.returncode}, no summary"
    statuses = Counter(s for rows in summary["models"].values() for r in rows for s in r["statuses"].values())
    failed = [f"{f['key']}: {f['status']}" for f in summary["failed"]]
    return seconds, ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + "".join(f"; {x}" for x in failed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the earlier commit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--framework", help="the frameworks (default: the quick suite's): those both commits' gates pass")
    args = ap.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True)
    if base.returncode:
        raise SystemExit(f"--base: no commit {args.base}")
    times: dict[str, list[tuple[float, str]]] = {"base": [], "head": []}
    extra = ["--framework", args.framework] if args.framework else []  # the quick suite's protocol still
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for i in range(args.rounds):
                for name, where in (("base", tree), ("head", ROOT)):
                    times[name].append(quick(where, Path(tmp) / f"{name}-{i}.db", extra))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    print(header(f"The quick suite's wall time: {head} against {base.stdout.strip()}"))
    print("Rounds alternate, the earlier commit first in each. Wall time of `dlbench run --json` (the quick suite, "
          f"{'frameworks ' + args.framework if args.framework else 'every installed framework'}), its cells' statuses "
          "in brackets.\n")
    print("| round | " + " | ".join(f"{base.stdout.strip()} (base)" if n == "base" else f"{head}" for n in times) + " |")
    print("|---:|---:|---:|")
    for i in range(args.rounds):
        print(f"| {i + 1} | " + " | ".join(f"{t[i][0] / 60:.2f} min ({t[i][1]})" for t in times.values()) + " |")
    med = {n: statistics.median(s for s, _ in t) for n, t in times.items()}
    print(f"\nMedian: {med['head'] / 60:.2f} min against {med['base'] / 60:.2f} min, "
          f"**{med['head'] / med['base']:.2f}x** the earlier commit's.")


if __name__ == "__main__":
    main()
