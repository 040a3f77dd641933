"""Command line of the distributed work: ``dlbench cluster up|down|status`` and ``dlbench
scaling-model RUN_ID`` (the scaling scenario's ``dlbench run`` flags and table are its own:
:mod:`dlbench.scenarios.scaling`)."""

from __future__ import annotations

import argparse
import json
import signal

from rich.markup import escape
from rich.table import Table

from dlbench.cli_common import console, int_list, texts
from dlbench.errors import UsageError
from dlbench.store import DEFAULT_DB, Store

#: the scaling model's columns of text (the rest are numbers, right-aligned)
TEXT_COLUMNS = frozenset(("model", "exchange", "scaling", "network", "algorithm"))


def _fmt(v, spec: str = ".3g", none: str = "–") -> str:
    return none if v is None else format(v, spec)


# --- dlbench scaling-model ------------------------------------------------------------------------
def cmd_scaling_model(args: argparse.Namespace) -> int:
    from dlbench import api
    from dlbench.distributed.model import LINKS
    from dlbench.distributed.report import extrapolation_rows, model_rows
    from dlbench.scenarios.scaling import SCALING

    res = api.results(args.run_id, args.db)
    store = Store(args.db, read_only=True)
    try:
        cells = SCALING.cells_of(res)
        compared = model_rows(cells, store)
        workers = tuple(int_list(args.workers, "worker counts")) if args.workers else (8, 16, 32, 64, 128, 256, 512, 1024)
        if args.compute_ms is not None and args.compute_ms <= 0:
            raise UsageError("--compute-ms must be positive")
        extra = extrapolation_rows(cells, store, workers, args.compute_ms)
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
        t.add_column(col, justify="left" if col in TEXT_COLUMNS else "right")
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

