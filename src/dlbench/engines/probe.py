"""``dlbench probe``: what each framework's kernels and per-call overhead reach on this machine.

A gap between frameworks on a model is often a gap between the libraries under them (MKL against
XLA's dots, oneDNN's convolution against Eigen's) or, for small models, the framework's own cost
per call. The probe measures both in every framework, through the same builders, gate and timing
protocol as any cell: the probe models of the zoo are ordinary models (``gemm``: fcn-r's largest
multiply; ``conv``: a ResNet stage-1 3x3 convolution; ``dense-1``: one 1-unit dense layer at batch
1, whose forward and train step are the framework's overhead floor). So a probe is a stored run
(suite ``probe``) whose cells passed the gate, and each row says which kernel library the framework
reports (``Backend.info()["kernels"]``). Like every run, a probe first measures the machine's matmul
peak per precision (:mod:`dlbench.measure.peak`: float32, and bfloat16 and int8 where the CPU computes
them natively); each GEMM or convolution row gives its share of its own precision's peak and names
that peak. ``--attach RUN`` copies the figures into another run's
environment record (key ``probes``), where its report and ``dlbench explain`` read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlbench.core.errors import UsageError
from dlbench.planning import flags
from dlbench.planning.plan import Suite
from dlbench.report.results import RunResults
from dlbench.storage.store import Store

#: probe model -> what it stands for, and the scenarios it is timed in
PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm": ("GEMM 1024x2048 @ 2048x4096 (fcn-r's largest layer)", ("forward",)),
    "conv": ("3x3 convolution, 64 channels at 56x56, batch 16", ("forward",)),
    "dense-1": ("per-call floor: one 1-unit dense layer, batch 1", ("forward", "train_step")),
}


@dataclass
class ProbeRow:
    framework: str
    variant: str
    probe: str
    scenario: str
    threads: int
    median_ms: float | None
    gflops: float | None
    kernels: str
    status: str
    reason: str = ""
    pct_peak: float | None = None
    peak: str | None = None  # the peak pct_peak is of (``measure.peak.describe``)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def suite(frameworks: list[str] | None, threads: list[int | str] | None, protocol: dict | None) -> Suite:
    """The probe run: each probe model in its scenarios, at 1 and all cores unless told."""
    s = flags.build_suite(models=list(PROBES), frameworks=frameworks, scenarios=["forward", "train_step"],
                          threads=threads or [1, "all"], protocol=protocol)
    exclude = [{"model": m, "scenario": sc} for m, (_, scs) in PROBES.items()
               for sc in ("forward", "train_step") if sc not in scs]
    return s.model_copy(update={"name": "probe", "exclude": exclude,
                                "description": "dlbench probe: GEMM, convolution and per-call floor"})


def rows(res: RunResults) -> list[ProbeRow]:
    out = []
    for c in res.cells:
        if c.cell.model not in PROBES:
            continue
        v = res.verifications.get((c.cell.framework, c.cell.variant, c.cell.model, c.cell.device,
                                     c.cell.precision), {})
        kernels = v.get("framework_info", {}).get("kernels") or "not reported by the backend"
        out.append(ProbeRow(c.cell.framework, c.cell.variant, c.cell.model, c.cell.scenario, c.cell.threads,
                            c.time_ms.median if c.ok and c.time_ms else None,
                            c.gflops if c.cell.model != "dense-1" else None, kernels, c.cell.status, c.cell.reason,
                            c.pct_peak if c.cell.model != "dense-1" else None,
                            c.peak if c.cell.model != "dense-1" else None))
    return out


def attach(db: str | Path, run_id: str, probe_rows: list[ProbeRow], probe_run: str) -> None:
    """Add the probe's figures to ``run_id``'s environment record (key ``probes``): additive, the
    run's cells and samples are not touched."""
    store = Store(db, create=False)
    try:
        store.get_run(run_id)  # an unknown run is a usage error, before anything is written
        env = store.environment(run_id)
        env["probes"] = [{**r.to_dict(), "op": r.probe, "probe_run": probe_run} for r in probe_rows]
        store.save_environment(run_id, env)
    finally:
        store.close()


def check_attach(db: str | Path, run_id: str) -> None:
    """Refuse ``--attach`` to a run that is not there before the probe measures anything."""
    if not Path(db).exists():
        raise UsageError(f"no dlbench database at {db} (for --attach {run_id})")
    store = Store(db, read_only=True)
    try:
        store.get_run(run_id)
    finally:
        store.close()
