"""Is the peak a peak? (issue 45: no fp32 cell of the quick suite or a transformer grid above its peak)

Reads stored runs (``dlbench export RUN --format json``): for each run, the peaks it measured (per precision
and thread count, the fastest of the installed engines' GEMMs, with the engine that set it) and every
cell's share of its precision's peak. It prints, per run and precision, the cells with a share, the
highest share, its cell and the peak it is of, and flags a share above 100%: a cell faster than the
machine's peak means the FLOP count or the peak is wrong. Nothing is measured here: it reads runs that
were (on a quiet machine: the runs' own headers say where and when).

    python benchmarks/peak_check.py --db DB RUN [RUN ...] [--db DB2 RUN ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from _common import dlbench, header


def _runs(argv: list[str]) -> list[tuple[str, str]]:
    """``--db A r1 r2 --db B r3`` -> [(A, r1), (A, r2), (B, r3)]."""
    out, db = [], None
    it = iter(argv)
    for arg in it:
        if arg == "--db":
            db = next(it, None)
            continue
        if db is None:
            raise SystemExit("name a database (--db DB) before its runs")
        out.append((db, arg))
    if not out:
        raise SystemExit("no run named (--db DB RUN ...)")
    return out


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        raise SystemExit(__doc__)
    title = header("Cells against their peak")
    rows = []
    above = 0
    for db, run in _runs(sys.argv[1:]):
        out = dlbench("export", run, "--format", "json", "--db", db)
        if out.returncode:
            raise SystemExit(f"dlbench export {run} failed: {out.stderr.strip()[-500:]}")
        data = json.loads(out.stdout)
        by_precision: dict[str, list[dict]] = defaultdict(list)
        for c in data["cells"]:
            if c.get("pct_peak") is not None:
                by_precision[c["precision"]].append(c)
        for precision, cells in sorted(by_precision.items()):
            top = max(cells, key=lambda c: c["pct_peak"])
            over = [c for c in cells if c["pct_peak"] > 100.0]
            above += len(over) if precision == "fp32" else 0
            rows.append((data["run"]["suite_name"], run, precision, len(cells), top, len(over)))
    print(title)
    print("Per run and precision: the cells with a share of their precision's peak (a peak per thread count: "
          "the fastest installed engine's GEMM), the highest share and the cell and peak it belongs to.\n")
    print("| suite | run | precision | cells | highest share | its cell | the peak | above 100% |")
    print("|---|---|---|---:|---:|---|---|---:|")
    for suite, run, precision, n, top, over in rows:
        print(f"| {suite} | {run} | {precision} | {n} | {top['pct_peak']:.1f}% | {top['key']} | {top.get('peak') or '–'} "
              f"| {over} |")
    print(f"\nfp32 cells above their peak: **{above}**.")


if __name__ == "__main__":
    main()
