"""An analytic model of data-parallel step time (pure functions, no I/O).

The alpha-beta model: sending a message of ``n`` bytes over a link costs ``alpha + n / beta``
(latency ``alpha`` in seconds, bandwidth ``beta`` in bytes/s). A synchronous data-parallel step
is the compute of one worker followed by the exchange of its gradients (``grad_bytes``):

* ring all-reduce (reduce-scatter then all-gather, 2(W-1) rounds of n/W bytes):
  ``2 (W-1)/W * n / beta + 2 (W-1) * alpha``;
* tree all-reduce (reduce up a binary tree, broadcast down, whole messages, not pipelined):
  ``2 ceil(log2 W) * (alpha + n / beta)``;
* parameter server with S shards (each worker pushes its n bytes and pulls n bytes, split over S
  shards; a shard's link carries W n / S each way; full-duplex links, shards on their own hosts):
  ``2 * (alpha + max(n, W n / S) / beta)``.

Step time = compute + exchange (no overlap: the upper bound; DDP overlaps the exchange with the
backward pass, so measured steps may be shorter) and, as a lower bound, max(compute, exchange).
Weak scaling keeps compute per worker; strong scaling divides it by W (compute linear in batch).
What the model leaves out, on purpose: CPU contention between workers sharing a machine,
framework overheads outside the exchange (bucketing, Python, serialisation: Ray's object
store for the parameter server), congestion, stragglers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_Bps: float  # bytes per second, one direction
    latency_s: float
    note: str = ""


#: links for extrapolation; the figures are assumptions, stated so they can be argued with
LINKS = (
    Link("10 Gb/s Ethernet", 10e9 / 8, 25e-6, "1.25 GB/s; 25 us per message (TCP through the kernel)"),
    Link("100 Gb/s InfiniBand", 100e9 / 8, 2e-6, "12.5 GB/s (EDR); 2 us per message (RDMA)"),
    Link("NVLink", 300e9, 5e-6, "~300 GB/s per GPU (V100 NVLink2 aggregate); 5 us per collective step (NCCL)"),
)

ALGORITHMS = ("ring", "tree", "ps")


def ring_allreduce_s(nbytes: float, workers: int, bandwidth_Bps: float, latency_s: float) -> float:
    if workers <= 1:
        return 0.0
    return 2 * (workers - 1) / workers * nbytes / bandwidth_Bps + 2 * (workers - 1) * latency_s


def tree_allreduce_s(nbytes: float, workers: int, bandwidth_Bps: float, latency_s: float) -> float:
    if workers <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(workers)) * (latency_s + nbytes / bandwidth_Bps)


def ps_exchange_s(nbytes: float, workers: int, shards: int, bandwidth_Bps: float, latency_s: float) -> float:
    """Push then pull through ``shards`` parameter servers (at W=1 the exchange still happens)."""
    return 2 * (latency_s + max(nbytes, workers * nbytes / max(shards, 1)) / bandwidth_Bps)


def exchange_s(algorithm: str, nbytes: float, workers: int, bandwidth_Bps: float, latency_s: float,
               shards: int = 1) -> float:
    if algorithm == "ring":
        return ring_allreduce_s(nbytes, workers, bandwidth_Bps, latency_s)
    if algorithm == "tree":
        return tree_allreduce_s(nbytes, workers, bandwidth_Bps, latency_s)
    if algorithm == "ps":
        return ps_exchange_s(nbytes, workers, shards, bandwidth_Bps, latency_s)
    raise ValueError(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


def compute_at(compute_1_s: float, workers: int, scaling: str) -> float:
    """Per-worker compute at W workers from the single-worker compute time."""
    return compute_1_s / workers if scaling == "strong" else compute_1_s


@dataclass(frozen=True)
class Prediction:
    workers: int
    compute_s: float
    exchange_s: float
    step_s: float  # compute + exchange (no overlap)
    step_overlap_s: float  # max(compute, exchange): perfect overlap
    speedup: float
    efficiency: float


def predict(compute_1_s: float, grad_bytes: float, workers: int, bandwidth_Bps: float, latency_s: float,
            algorithm: str = "ring", scaling: str = "weak", shards: int = 1) -> Prediction:
    """Step time at W workers and the speedup over one worker training alone (no exchange at all),
    as a throughput ratio, so every algorithm is measured against the same baseline."""
    comp = compute_at(compute_1_s, workers, scaling)
    ex = exchange_s(algorithm, grad_bytes, workers, bandwidth_Bps, latency_s, shards)
    base = compute_1_s
    step = comp + ex
    # throughput: weak scaling processes W batches per step, strong scaling one global batch
    work = workers if scaling == "weak" else 1
    speedup = work * base / step
    return Prediction(workers, comp, ex, step, max(comp, ex), speedup, speedup / workers)


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def extrapolate(compute_1_s: float, grad_bytes: float, workers: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024),
                links: tuple[Link, ...] = LINKS, algorithms: tuple[str, ...] = ALGORITHMS, scaling: str = "weak",
                shards: int | None = None) -> list[dict]:
    """Rows (link, algorithm, W, step, speedup, efficiency) for the report; the parameter server
    gets ``shards`` shards (default: one per 8 workers, at least 1)."""
    rows = []
    for link in links:
        for algo in algorithms:
            for w in workers:
                s = shards if shards is not None else max(1, w // 8)
                p = predict(compute_1_s, grad_bytes, w, link.bandwidth_Bps, link.latency_s, algo, scaling, s)
                rows.append({"link": link.name, "algorithm": algo if algo != "ps" else f"ps (S={s})", "workers": w,
                             "compute_ms": p.compute_s * 1e3, "exchange_ms": p.exchange_s * 1e3,
                             "step_ms": p.step_s * 1e3, "speedup": p.speedup, "efficiency": p.efficiency})
    return rows
