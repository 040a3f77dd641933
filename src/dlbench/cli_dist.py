"""Command line of the distributed work: ``dlbench run`` flags for the scaling scenario,
``dlbench cluster up|down|status`` and ``dlbench scaling-model RUN_ID``."""

from __future__ import annotations

import argparse
import json
import signal

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dlbench.cli_common import console, int_list, names, texts
from dlbench.errors import UsageError
from dlbench.store import DEFAULT_DB, Store


# --- dlbench run flags --------------------------------------------------------------------------
def add_run_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scaling scenario (--scenario scaling)")
    g.add_argument("--workers", help="comma-separated worker counts, e.g. 1,2,4")
    g.add_argument("--scaling", choices=("weak", "strong"), help="weak: --batch per worker; strong: --batch is global")
    g.add_argument("--exchange", help="comma-separated: allreduce (default), ps-sync, ps-async (Ray parameter server)")
    g.add_argument("--ps-shards", type=int, dest="ps_shards", help="parameter-server shards (default 2)")
    g.add_argument("--launcher", choices=("subprocess", "torchrun", "ray"),
                   help="torchrun: this machine is one of --nnodes; ray: cells run as tasks on the Ray cluster at --address")
    g.add_argument("--nnodes", type=int, help="machines taking part (with --launcher torchrun)")
    g.add_argument("--node-rank", type=int, dest="node_rank", help="this machine's rank (with --launcher torchrun)")
    g.add_argument("--rdzv-endpoint", dest="rdzv_endpoint", help="HOST:PORT of the c10d rendezvous (node 0)")
    g.add_argument("--address", help="Ray cluster address HOST:PORT (with --launcher ray)")
    g.add_argument("--mixed-nodes", action="store_true", dest="mixed_nodes",
                   help="with --launcher ray: spread cells over nodes even if they differ in CPU model, SIMD flags "
                        "or GPUs (each such cell carries a warning; refused otherwise)")
    g.add_argument("--cluster", action="store_true",
                   help="one worker per network namespace (the cluster that is up, or one made for the run)")
    g.add_argument("--bandwidth", help="link rate when --cluster makes the namespaces (default 1gbit)")
    g.add_argument("--latency", help="link latency when --cluster makes the namespaces (needs tc netem)")


def distributed_flags(args: argparse.Namespace) -> dict | None:
    """The suite's ``distributed`` section from the flags (None when none was given). Parsing only: which
    settings go together is the suite's rule (:class:`dlbench.plan.DistributedModel`), so a suite file
    and the Python API are held to it too."""
    out: dict = {}
    if args.workers is not None:
        out["workers"] = int_list(args.workers, "worker counts")
    if args.exchange is not None:
        out["exchange"] = names(args.exchange, "--exchange")
    for flag, key in (("scaling", "scaling"), ("ps_shards", "ps_shards"), ("launcher", "launcher"),
                      ("nnodes", "nnodes"), ("node_rank", "node_rank"), ("rdzv_endpoint", "rdzv_endpoint"),
                      ("address", "ray_address"), ("bandwidth", "bandwidth"), ("latency", "latency")):
        if getattr(args, flag) is not None:
            out[key] = getattr(args, flag)
    if args.mixed_nodes:
        out["mixed_nodes"] = True
    if args.cluster:
        out["cluster"] = "netns"
    return out or None


# --- dlbench show: the scaling table ---------------------------------------------------------------
def _fmt(v, spec: str = ".3g", none: str = "–") -> str:
    return none if v is None else format(v, spec)


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:.2f}"


def scaling_json(res, db) -> list[dict]:
    """The scaling rows of a run, for ``--json`` output (empty without scaling cells)."""
    if not any(c.cell.scenario == "scaling" for c in res.cells):
        return []
    from dlbench.distributed.report import scaling_rows

    store = Store(db, read_only=True)
    try:
        return scaling_rows(res, store)
    finally:
        store.close()


def print_scaling(res, db) -> None:
    """The scaling table of a run (nothing when it has no scaling cells)."""
    if not any(c.cell.scenario == "scaling" for c in res.cells):
        return
    from dlbench.distributed.report import scaling_rows

    store = Store(db, read_only=True)
    try:
        rows = scaling_rows(res, store)
    finally:
        store.close()
    table = Table(title="scaling (train step, synchronous unless ps-async)", title_justify="left")
    for col in ("model", "framework", "exchange", "scaling", "network", "W", "batch/worker", "step ms", "compute ms",
                "comm ms", "samples/s", "speedup", "efficiency", "grad MiB", "wire MiB/step", "same params", "staleness"):
        table.add_column(col, justify="left" if col in ("model", "framework", "exchange", "scaling", "network") else "right")
    for r in rows:
        if r["status"] != "ok":
            table.add_row(*texts(r["model"], r["framework"], r["exchange"], r["scaling"], r["network"], r["workers"],
                                 r["per_worker_batch"], f"– ({r['status']})", *[""] * 9))
            continue
        st = r.get("staleness") or {}
        table.add_row(*texts(r["model"], r["framework"], r["exchange"], r["scaling"], r["network"], r["workers"],
                             r["per_worker_batch"], _fmt(r["step_ms"]), _fmt(r.get("compute_ms")),
                             _fmt(r.get("comm_ms")), _fmt(r.get("samples_per_s"), ",.0f"), _fmt(r.get("speedup"), ".2f"),
                             _fmt(r.get("efficiency"), ".2f"), _mib(r.get("grad_bytes")),
                             _mib(r.get("wire_bytes_per_step")),
                             {True: "yes", False: Text("NO", "red"), None: "–"}[r.get("params_identical")],
                             f"mean {st['mean']:.2f}, p95 {st['p95']:.0f}, max {st['max']}" if st else "–"))
    console.print(table)


# --- dlbench scaling-model ------------------------------------------------------------------------
def cmd_scaling_model(args: argparse.Namespace) -> int:
    from dlbench import api
    from dlbench.distributed.model import LINKS
    from dlbench.distributed.report import extrapolation_rows, model_rows

    res = api.results(args.run_id, args.db)
    store = Store(args.db, read_only=True)
    try:
        compared = model_rows(res, store)
        workers = tuple(int_list(args.workers, "worker counts")) if args.workers else (8, 16, 32, 64, 128, 256, 512, 1024)
        if args.compute_ms is not None and args.compute_ms <= 0:
            raise UsageError("--compute-ms must be positive")
        extra = extrapolation_rows(res, store, workers, args.compute_ms)
    finally:
        store.close()
    if not compared and not extra:
        raise UsageError(f"run {res.run_id} has no finished scaling cells with a W=1 baseline")
    if args.json:
        print(json.dumps({"run_id": res.run_id, "measured_vs_predicted": compared, "extrapolation": extra,
                          "links": [vars(k) for k in LINKS]}, indent=2, default=str))
        return 0
    t = Table(title=escape(f"scaling model vs measurement, run {res.run_id} (step = compute(W=1) + exchange, "
                         "no overlap)"), title_justify="left")
    for col in ("model", "exchange", "scaling", "network", "W", "algorithm", "link MB/s", "latency us", "compute(1) ms",
                "exchange ms pred", "comm ms meas", "step ms pred", "step ms meas", "error %", "compute(W) ms",
                "pred. on compute(W)", "error %"):
        t.add_column(col, justify="left" if col in ("model", "exchange", "scaling", "network", "algorithm") else "right")
    for r in compared:
        t.add_row(*texts(r["model"], r["exchange"], r["scaling"], r["network"], r["workers"], r["algorithm"],
                         f"{r['bandwidth_Bps'] / 1e6:,.0f}", f"{r['latency_s'] * 1e6:.0f}", _fmt(r["compute_1_ms"]),
                         _fmt(r["predicted_exchange_ms"]), _fmt(r["measured_comm_ms"]), _fmt(r["predicted_step_ms"]),
                         _fmt(r["measured_step_ms"]), f"{r['error_pct']:+.0f}", _fmt(r.get("measured_compute_ms")),
                         _fmt(r.get("predicted_own_compute_step_ms")),
                         f"{r['error_own_compute_pct']:+.0f}" if "error_own_compute_pct" in r else "–"))
    console.print(t)
    source = f"compute {args.compute_ms:g} ms per step (given)" if args.compute_ms else "measured W=1 compute"
    for link in LINKS:
        t = Table(title=escape(f"extrapolation on {link.name} ({link.note}); {source}"), title_justify="left")
        for col in ("model", "batch/worker", "algorithm", *[f"W={w}" for w in workers]):
            t.add_column(col, justify="left" if col in ("model", "algorithm") else "right")
        rows = [r for r in extra if r["link"] == link.name]
        groups: dict[tuple, dict[int, dict]] = {}
        for r in rows:
            groups.setdefault((r["model"], r["batch_per_worker"], r["algorithm"].split(" ")[0]), {})[r["workers"]] = r
        for (m, b, algo), by_w in groups.items():
            t.add_row(*texts(m, b, algo + (" (S=W/8)" if algo == "ps" else ""),
                             *[f"{by_w[w]['efficiency']:.2f}" if w in by_w else "–" for w in workers]))
        console.print(t)
    console.print(f"cells: parallel efficiency (speedup / W over one worker alone), {source}; "
                  "--json for step times and speedups", highlight=False)
    return 0


# --- dlbench cluster ---------------------------------------------------------------------------
def cmd_cluster(args: argparse.Namespace) -> int:
    from dlbench.distributed import cluster as netns

    if args.action == "down":
        removed = netns.down()
        console.print(f"removed {', '.join(removed)}" if removed else "no dlbench cluster was up", highlight=False,
                      markup=False)
        return 0
    if args.action == "status":
        state = netns.load_state()
        if state is None:
            console.print("no dlbench cluster is up")
            return 0
        if args.json:
            print(json.dumps(state.to_dict(), indent=2))
        else:
            console.print(state.describe(), highlight=False, markup=False)
            for n in state.nodes:
                console.print(f"  {n.ns}: {n.addr} on {n.ns_if} (bridge side {n.host_if})", highlight=False,
                              markup=False)
        return 0
    if args.nodes is None:
        raise UsageError("cluster up needs --nodes N")
    old = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        state = netns.up(args.nodes, args.bandwidth, args.latency)
    except netns.ClusterError as exc:
        raise UsageError(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, old)
    console.print(f"up: {state.describe()}; nodes {', '.join(n.addr for n in state.nodes)}", highlight=False,
                  markup=False)
    return 0


def register(sub) -> None:
    p = sub.add_parser("cluster", help="network namespaces joined by shaped links, for scaling runs on one machine")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--nodes", type=int)
    p.add_argument("--bandwidth", default="1gbit", help="tc tbf rate of every link, e.g. 100mbit, 1gbit (default)")
    p.add_argument("--latency", help="added latency, e.g. 0.2ms (needs tc netem)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("scaling-model", help="predicted vs measured step time of a run's scaling cells, "
                                             "and an extrapolation to many workers")
    p.add_argument("run_id", nargs="?", help="default: the latest run")
    p.add_argument("--workers", help="worker counts to extrapolate to (default 8,16,...,1024)")
    p.add_argument("--compute-ms", type=float, dest="compute_ms",
                   help="extrapolate from this single-worker compute time instead of the measured one (e.g. a GPU's)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_scaling_model)

