"""Does dlbench's timer add anything? (issue: measurement)

1. A ~1 ms workload timed two ways in the same process, interleaved in blocks so drift hits both:
   a bare ``perf_counter_ns`` loop, and dlbench's :func:`time_callable`. Target: dlbench's median
   within 2% of the bare loop's.
2. A >= 10 ms step measured by ``dlbench.run`` in 3 fresh processes: the spread of the per-process
   medians (what the repeats are for).

Prints a Markdown block for docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import header


def calibrated_workload(target_ns: float = 1_000_000):
    """A torch lenet forward whose batch is chosen so one call takes about ``target_ns``."""
    import torch

    from dlbench.data import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    torch.set_num_threads(1)
    backend = get_backend("torch")
    spec = get_model("lenet")
    model = backend.build(spec, init_weights(spec, 0))
    batch = 1
    while True:
        fn = backend.forward(model, backend.place(make_batch(spec, batch), model))
        for _ in range(20):
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(50):
            fn()
        per = (time.perf_counter_ns() - t0) / 50
        if per >= target_ns or batch >= 4096:
            return fn, backend.sync, batch, per
        batch = max(batch + 1, int(batch * target_ns / per))


def bare_loop(fn, sync, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        sync(fn())
        out.append(time.perf_counter_ns() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()

    from dlbench.measure.timer import Protocol, time_callable

    fn, sync, batch, per = calibrated_workload()
    bare, ours, ks = [], [], []
    protocol = Protocol(warmup=5, min_iters=args.iters, min_time_s=0.0)
    for _ in range(args.blocks):
        bare += bare_loop(fn, sync, args.iters)
        t = time_callable(fn, sync, protocol)
        ours += t.samples_ns
        ks.append(t.loop_k)
    mb, mo = statistics.median(bare), statistics.median(ours)
    print(header("Harness overhead: a ~1 ms step"))
    print(f"- workload: torch lenet forward, batch {batch}, 1 thread ({per / 1e6:.3f} ms per call when calibrated)")
    print(f"- bare perf_counter loop median: {mb / 1e6:.4f} ms ({len(bare)} samples)")
    print(f"- dlbench time_callable median: {mo / 1e6:.4f} ms ({len(ours)} samples, loop k = {sorted(set(ks))})")
    print(f"- ratio dlbench / bare: **{mo / mb:.4f}** (target: within 2%, i.e. 0.98-1.02)\n")

    from dlbench import api

    with tempfile.TemporaryDirectory() as tmp:
        res = api.run(models=["lenet"], frameworks=["torch"], scenarios=["train_step"], batches=[64], threads=[1],
                      protocol={"warmup": 10, "min_iters": 20, "min_time_s": 2.0, "repeats": 3},
                      db=Path(tmp) / "r.db")
    (cell,) = res.cells
    meds = cell.repeat_medians_ms
    spread = (max(meds) - min(meds)) / float(np.median(meds))
    print(header("Spread of per-process medians: a >= 10 ms step, 3 fresh processes"))
    print("- workload: torch lenet train_step, batch 64, 1 thread")
    print(f"- medians per process (ms): {', '.join(f'{m:.3f}' for m in meds)}")
    print(f"- spread (max - min) / median: **{100 * spread:.2f}%**; 95% CI of the pooled median: "
          f"[{cell.time_ms.ci_low:.3f}, {cell.time_ms.ci_high:.3f}] ms")


if __name__ == "__main__":
    main()
