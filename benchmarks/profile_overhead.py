"""Does ``--profile`` leave the timed samples alone? The same cells twice, plain and profiled, compared
with the process-level test ``dlbench compare`` uses: the profiler runs after the timed calls, so no
cell may come out significantly slower (nor faster) when profiled.

    python benchmarks/profile_overhead.py [--quick]

Exit 0 when no matched cell differs significantly. On a busy machine noise alone can differ: run it
on a quiet one.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one model, a short protocol (plumbing check)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import header

    from dlbench import api
    from dlbench.report.compare import compare_runs

    frameworks = [fw for fw, module in (("torch", "torch"), ("jax", "flax"), ("tensorflow", "tensorflow"))
                  if importlib.util.find_spec(module) is not None]
    protocol = ({"warmup": 3, "min_iters": 20, "min_time_s": 0.5, "repeats": 3} if args.quick
                else {"warmup": 10, "min_iters": 50, "min_time_s": 1.0, "repeats": 6})
    axes = {"models": ["lenet"] if args.quick else ["lenet", "resnet-56"], "frameworks": frameworks,
            "scenarios": ["forward", "train_step"], "threads": [1]}
    db = Path(tempfile.mkdtemp(prefix="dlbench-profile-")) / "results.db"
    plain = api.run(db=db, protocol=protocol, **axes)
    profiled = api.run(db=db, protocol={**protocol, "profile_calls": 5}, **axes)
    cmp = compare_runs(plain, profiled)

    print(header("--profile: timed samples with and without the profiler"))
    print(f"- protocol {protocol}; plain run {plain.run_id}, profiled run {profiled.run_id} (5 profiled calls)\n")
    print("| cell | plain ms | profiled ms | ratio [95% CI] | p | verdict | top operation (self ms per call) |")
    print("|---|---:|---:|---:|---:|---|---|")
    by_key = {c.cell.key: c for c in profiled.cells}
    for m in cmp.matched:
        p = by_key[m.key].cell.metrics.get("profile")
        top = f"{p['ops'][0]['name']} ({p['ops'][0]['self_us'] / 1e3 / p['calls']:.3g})" if p else "no profile"
        print(f"| {m.key} | {m.median_a_ms:.3g} | {m.median_b_ms:.3g} | {m.ratio:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}] | "
              f"{m.p_value:.2g} | {m.verdict} | {top} |")
    differ = cmp.slower + cmp.faster
    print(f"\n- cells profiled: {sum('profile' in c.cell.metrics for c in profiled.cells)} of {len(profiled.cells)}; "
          f"significantly different: {len(differ)} of {len(cmp.matched)}: "
          + ("**OK**" if not differ else "**DIFFERENT** (" + ", ".join(m.key for m in differ) + ")"))
    return 0 if not differ and cmp.matched else 1


if __name__ == "__main__":
    sys.exit(main())
