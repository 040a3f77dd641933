"""Scaling tables from a stored run: speedup and efficiency per worker count, the compute /
communication split, bytes exchanged, staleness of the parameter server, and the scaling model's
prediction for every measured cell (predicted vs measured, error %) plus its extrapolation.

Everything is recomputed from the raw samples and metrics the store keeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlbench.cell_result import CellResult
from dlbench.distributed import model as sm
from dlbench.report.document import DASH, Column, Table, Value
from dlbench.store import Store

ALGORITHM = {"allreduce": "ring", "ps-sync": "ps", "ps-async": "ps"}


def _median_ms(store: Store, cell_id: int, phase: str) -> float | None:
    values = [s.value_ns / 1e6 for s in store.samples(cell_id, phase)]
    return float(np.median(values)) if values else None


def _group(c: CellResult) -> tuple:
    m = c.cell.metrics
    scaling = m.get("scaling") or "weak"
    size = m.get("per_worker_batch") if scaling == "weak" else m.get("global_batch")
    return (c.cell.model, c.cell.framework, c.cell.variant, c.cell.threads, c.cell.device, scaling,
            m.get("exchange", "allreduce"), m.get("cluster", ""), m.get("launcher", "subprocess"), size)


def link_of(metrics: dict[str, Any]) -> tuple[float | None, float, str]:
    """(bandwidth bytes/s, latency s, where the figures come from) of a cell's network."""
    net = metrics.get("network") or {}
    probe = net.get("probe") or {}
    if net.get("bandwidth_bps"):
        lat = net.get("latency_s") or probe.get("latency_s") or 0.0
        probed = " + probed latency" if probe and not net.get("latency_s") else ""
        return net["bandwidth_bps"] / 8, lat, "tbf rate" + probed
    if probe:
        return probe["bandwidth_Bps"], probe["latency_s"], "probed (TCP)"
    return None, 0.0, "unknown"


def scaling_rows(cells: list[CellResult], store: Store) -> list[dict[str, Any]]:
    """One row per scaling cell (``cells``: the scaling scenario's), with speedup and efficiency against
    the W=1 cell of its group."""
    base: dict[tuple, CellResult] = {}
    for c in cells:
        if c.ok and c.cell.metrics.get("workers") == 1:
            base[_group(c)] = c
    rows = []
    for c in cells:
        m = c.cell.metrics
        row: dict[str, Any] = {
            "key": c.cell.key, "model": c.cell.model, "framework": c.cell.framework, "variant": c.cell.variant,
            "exchange": m.get("exchange", "allreduce"), "scaling": m.get("scaling", "weak"),
            "network": (m.get("network") or {}).get("kind", "loopback"), "workers": m.get("workers", 1),
            "per_worker_batch": m.get("per_worker_batch"), "global_batch": m.get("global_batch"),
            "status": c.cell.status, "reason": c.cell.reason,
        }
        if c.ok and c.time_ms is not None:
            b = base.get(_group(c))
            row.update(step_ms=c.time_ms.median, step_ci_ms=(c.time_ms.ci_low, c.time_ms.ci_high),
                       compute_ms=_median_ms(store, c.cell.id, "compute"), comm_ms=_median_ms(store, c.cell.id, "comm"),
                       samples_per_s=c.samples_per_s, grad_bytes=m.get("grad_bytes"),
                       payload_bytes_per_step=m.get("payload_bytes_per_step"),
                       wire_bytes_per_step=m.get("iface_bytes_per_step_per_worker") or m.get("ring_wire_bytes_per_worker"),
                       wire_bytes_source="interface counters (tx+rx)" if m.get("iface_bytes_per_step_per_worker")
                       else "ring estimate 2(W-1)/W x payload",
                       params_identical=m.get("params_identical"), staleness=m.get("staleness"))
            row["exposed_comm_ms"] = (row["step_ms"] - row["compute_ms"]) if row["compute_ms"] is not None else None
            if b is not None and b.samples_per_s:
                row["speedup"] = c.samples_per_s / b.samples_per_s
                row["efficiency"] = row["speedup"] / row["workers"]
        rows.append(row)
    return rows


def model_rows(cells: list[CellResult], store: Store) -> list[dict[str, Any]]:
    """The scaling model's prediction for every measured scaling cell: from the W=1 cell's compute
    time, the gradient bytes and the link's bandwidth and latency. A second figure puts the same
    modelled exchange on the compute time measured in the cell itself (its no-exchange step, run
    while the other workers run): where workers share a machine's cores, that separates what
    the network costs from what sharing the cores costs, which the model does not describe."""
    rows = scaling_rows(cells, store)
    by_key = {c.cell.key: c for c in cells}
    base: dict[tuple, dict] = {}
    for r in rows:
        if r["workers"] == 1 and r.get("compute_ms") is not None:
            base[_group(by_key[r["key"]])] = r
    out = []
    for r in rows:
        if r.get("step_ms") is None:
            continue
        c = by_key[r["key"]]
        b = base.get(_group(c))
        bw, lat, source = link_of(c.cell.metrics)
        if b is None or bw is None or not r.get("grad_bytes"):
            continue
        algo = ALGORITHM.get(r["exchange"], "ring")
        shards = int(c.cell.metrics.get("ps_shards") or 1)
        p = sm.predict(b["compute_ms"] / 1e3, r["grad_bytes"], r["workers"], bw, lat, algo, r["scaling"], shards)
        measured_comm = r.get("comm_ms")
        out.append({
            "model": r["model"], "framework": r["framework"], "exchange": r["exchange"], "scaling": r["scaling"],
            "network": r["network"], "workers": r["workers"], "algorithm": algo if algo != "ps" else f"ps (S={shards})",
            "bandwidth_Bps": bw, "latency_s": lat, "link_source": source,
            "compute_1_ms": b["compute_ms"], "predicted_exchange_ms": p.exchange_s * 1e3,
            "measured_comm_ms": measured_comm, "predicted_step_ms": p.step_s * 1e3,
            "predicted_overlap_ms": p.step_overlap_s * 1e3, "measured_step_ms": r["step_ms"],
            "error_pct": sm.error_pct(p.step_s * 1e3, r["step_ms"]),
            "measured_compute_ms": r.get("compute_ms"),
        })
        own = r.get("compute_ms")
        if own is not None:  # the same exchange on this cell's own compute time: contention included
            out[-1]["predicted_own_compute_step_ms"] = own + p.exchange_s * 1e3
            out[-1]["error_own_compute_pct"] = sm.error_pct(own + p.exchange_s * 1e3, r["step_ms"])
    return out


def extrapolation_rows(cells: list[CellResult], store: Store, workers=(8, 16, 32, 64, 128, 256, 512, 1024),
                       compute_ms: float | None = None) -> list[dict]:
    """For each measured model: its W=1 compute time (or ``compute_ms``, e.g. a GPU's step time)
    and gradient bytes carried to 8..1024 workers on the stated links (:data:`dlbench.distributed.model.LINKS`)."""
    out = []
    seen = set()
    for r in scaling_rows(cells, store):
        if r["workers"] != 1 or r.get("compute_ms") is None or r["exchange"] != "allreduce":
            continue
        key = (r["model"], r["framework"], r["scaling"], r["per_worker_batch"])
        if key in seen or not r.get("grad_bytes"):
            continue
        seen.add(key)
        compute = compute_ms if compute_ms is not None else r["compute_ms"]
        for row in sm.extrapolate(compute / 1e3, r["grad_bytes"], workers, scaling=r["scaling"]):
            out.append({"model": r["model"], "framework": r["framework"], "batch_per_worker": r["per_worker_batch"],
                        "compute_1_ms": compute, "grad_bytes": r["grad_bytes"], **row})
    return out


def _fmt(v, spec: str = ".3g") -> str:
    return DASH if v is None else format(v, spec)


def _mib(v) -> str:
    return DASH if v is None else f"{v / 2**20:.2f}"


def scaling_table(rows: list[dict[str, Any]]) -> Table:
    """:func:`scaling_rows` as the table ``dlbench run`` and ``show`` print after the summary."""
    text = ("model", "framework", "exchange", "scaling", "network")
    cols = [Column(c, c, numeric=c not in text) for c in (
        *text, "W", "batch/worker", "step ms", "compute ms", "comm ms", "samples/s", "speedup", "efficiency",
        "grad MiB", "wire MiB/step", "same params", "staleness")]
    out = []
    for r in rows:
        head = [Value(str(r[k])) for k in (*text, "workers", "per_worker_batch")]
        if r["status"] != "ok":
            out.append(head + [Value(f"{DASH} ({r['status']})")] + [Value("")] * 9)
            continue
        st = r.get("staleness") or {}
        out.append(head + [Value(x) for x in (
            _fmt(r["step_ms"]), _fmt(r.get("compute_ms")), _fmt(r.get("comm_ms")), _fmt(r.get("samples_per_s"), ",.0f"),
            _fmt(r.get("speedup"), ".2f"), _fmt(r.get("efficiency"), ".2f"), _mib(r.get("grad_bytes")),
            _mib(r.get("wire_bytes_per_step")), {True: "yes", False: "NO", None: DASH}[r.get("params_identical")],
            f"mean {st['mean']:.2f}, p95 {st['p95']:.0f}, max {st['max']}" if st else DASH)])
    return Table("scaling (train step, synchronous unless ps-async)", cols, out)
