"""Where JAX's whole ResNet-56 gradient spends the time its blocks alone do not: the layers study
(docs/explain.md) found JAX's whole-model gradient 33% slower than the sum of its parts. This profiles
the whole model and two blocks (``--profile``, after the timed calls) and sorts every XLA operation's
self time into layout changes (``transpose``/``copy`` fusions), convolutions and other fusions.

    python benchmarks/jax_layout_profile.py

Prints per cell the timed median, the profiled self time per call and each kind's share.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the whole model, its first stage-1 block (the slowest part against torch) and a stage-3 block
MODELS = ["resnet-56", "resnet-56#1", "resnet-56#20"]
CALLS = 3


def kind(op: str) -> str:
    if op.startswith(("transpose", "copy")):
        return "layout (transpose/copy)"
    if "convolution" in op or op.startswith("conv_general"):
        return "convolution"
    return "other fusions and ops"


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import header

    from dlbench import api
    from dlbench.measure.profile import complete_events, op_table, read_trace
    from dlbench.storage.store import Store

    head = header("JAX ResNet-56 gradient: the whole model's profile against its blocks'")
    db = Path(tempfile.mkdtemp(prefix="dlbench-layout-")) / "results.db"
    res = api.run(models=MODELS, frameworks=["jax"], scenarios=["gradient"], threads=[1], db=db,
                  protocol={"repeats": 1, "warmup": 1, "min_iters": 3, "min_time_s": 0.5, "profile_calls": CALLS})
    artifacts = Store(db, read_only=True).artifacts_dir(res.run_id)
    kinds = ["layout (transpose/copy)", "convolution", "other fusions and ops"]
    print(head)
    print(f"- `dlbench run --model {','.join(MODELS)} --framework jax --scenario gradient --threads 1 --profile {CALLS}` "
          "(1 process, at least 3 calls and 0.5 s)\n")
    print("| model | timed median ms | profiled self ms per call | " + " | ".join(kinds) + " |")
    print("|---|---:|---:|" + "---:|" * len(kinds))
    for c in sorted(res.cells, key=lambda c: MODELS.index(c.cell.model)):
        profile = c.cell.metrics.get("profile")
        if not c.ok or profile is None:
            print(f"| {c.cell.model} | {c.cell.status} | | " + " | " * len(kinds))
            continue
        events = read_trace(artifacts / profile["trace"])
        rows = op_table(complete_events(events, lambda e: "hlo_op" in (e.get("args") or {})))
        total = sum(r.self_us for r in rows)
        by_kind = {k: sum(r.self_us for r in rows if kind(r.name) == k) for k in kinds}
        shares = " | ".join(f"{by_kind[k] / CALLS / 1e3:,.1f} ({100 * by_kind[k] / total:.0f}%)" for k in kinds)
        print(f"| {c.cell.model} | {c.time_ms.median:,.1f} | {total / CALLS / 1e3:,.1f} | {shares} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
