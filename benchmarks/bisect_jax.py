"""The real bisection of docs/bisect.md: which JAX release between 0.4.38 and 0.10.2 made fcn-r's training
step slower at 1 thread (the versions study found 0.10.2 37.7% slower than 0.4.38 there, on an AVX2 machine).

    python benchmarks/update_performance.py bisect_jax                       # the issue's bisection (long)
    python benchmarks/update_performance.py bisect_jax --args "--model lstm-imdb --scenario forward"

Runs ``dlbench bisect`` over the releases pip lists, with 5 processes per release per measurement and up
to 15 before a step is called inconclusive, and prints the result: the first bad release, its ratio to
the last good one with the interval, every judged release, the releases skipped, the environments built,
the wall time, the machine with its CPU flags and the command. When the bisection names no release (for
instance, the ends do not differ on this machine), the fragment says so and why: then pick a figure whose
ends differ (``dlbench compare --baseline jax==0.4.38`` on a run of both ends shows which).

``--workdir DIR`` keeps the database there: an interrupted bisection is resumed (``dlbench bisect
--resume``), the environments stay in ``~/.cache/dlbench/envs`` either way. ``--framework`` and the ends
can name another pinnable framework (the script's plumbing is checked on the test's fake releases).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import dlbench, header


def cpu_flags() -> str:
    """The vector and matrix extensions of this CPU (the rest of its flags do not move a GEMM)."""
    try:
        import cpuinfo

        flags = cpuinfo.get_cpu_info().get("flags", [])
    except Exception:
        return "unknown"
    keep = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4", "f16c")))
    return " ".join(keep) or "none of avx/amx/fma"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="jax")
    ap.add_argument("--good", default="0.4.38")
    ap.add_argument("--bad", default="0.10.2")
    ap.add_argument("--model", default="fcn-r")
    ap.add_argument("--scenario", default="train_step")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--repeats", default="5")
    ap.add_argument("--max-repeats", default="15", dest="max_repeats")
    ap.add_argument("--min-time", default=None, dest="min_time", help="seconds of sampling per process")
    ap.add_argument("--workdir", type=Path, help="keep the database here (an interrupted bisection resumes)")
    ap.add_argument("--faster", action="store_true", help="the release that made the figure faster")
    args = ap.parse_args()
    head = header(f"Bisecting {args.framework} {args.good} .. {args.bad}: {args.model} {args.scenario}, "
                  f"{args.threads} thread(s)" + (", the release that made it faster" if args.faster else ""))
    flags = ["--framework", args.framework, "--good", args.good, "--bad", args.bad, "--model", args.model,
             "--scenario", args.scenario, "--threads", args.threads, "--repeats", args.repeats,
             "--max-repeats", args.max_repeats, *(["--min-time", args.min_time] if args.min_time else []),
             *(["--faster"] if args.faster else [])]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        unfinished = []
        if Path(db).exists():
            stored = json.loads(dlbench("bisect", "--list", "--json", "--db", db).stdout or "[]")
            unfinished = [b["id"] for b in stored if b["status"] in ("running", "interrupted")]
        argv = ["bisect", "--resume", unfinished[-1]] if unfinished else ["bisect", *flags]
        t0 = time.perf_counter()
        out = dlbench(*argv, "--db", db, "--json")
        wall = time.perf_counter() - t0
        if out.returncode == 2 or not out.stdout.strip():
            raise SystemExit(f"dlbench {' '.join(argv)} exited {out.returncode}: {out.stderr[-3000:]}")
        b = json.loads(out.stdout)
    s, r = b["settings"], b["result"]
    print(head)
    print(f"- CPU flags (vector and matrix): {cpu_flags()}")
    print(f"- `dlbench {' '.join(argv)}`: exit code {out.returncode}, {wall / 60:.1f} min wall time "
          f"(the bisection's own clock: {b['seconds'] / 60:.1f} min over every attempt)")
    print(f"- releases pip listed ({len(b['releases'])}): {', '.join(b['releases'])}")
    print(f"- environments used: {len(b['used'])} ({', '.join(b['used'])}); built by this bisection: "
          f"{len(b['built'])} ({', '.join(b['built']) or 'none: the others were built before'})"
          + (f"; pip could not install: {', '.join(b['not_installable'])}" if b["not_installable"] else "")
          + f"; threshold {s['threshold']:.0%}, {s['repeats']} processes per release per measurement, "
            f"at most {s['max_repeats']}\n")
    if b["status"] == "found":
        t = r["ratio"]
        first = "First faster release" if s.get("change") == "faster" else "First bad release"
        print(f"**{first}: {s['framework']} {r['first_bad']}** (last good: {r['last_good']}). "
              + (f"{r['first_bad']} / {r['last_good']}: {t['ratio']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}], "
                 f"p = {t['p']:.2g}, medians {t['median_ms'][0]:.4g} and {t['median_ms'][1]:.4g} ms, "
                 f"{t['processes'][0]} and {t['processes'][1]} processes, measured in one run." if t else ""))
    else:
        print(f"**No release named: {b['status']}**: {r.get('message') or ', '.join(r.get('candidates', []))}")
    print("\n| release | verdict | against (last good, first bad) | test against the last good | processes | runs | "
          "why |\n|---|---|---|---|---|---|---|")
    for st in b["steps"]:
        t = st["vs_good"]
        test = f"{t['ratio']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}], p={t['p']:.2g}" if t else ""
        against = ", ".join(v for v in st["against"] if v) or ""
        print(f"| {st['version']} | {st['verdict']} | {against} | {test} | {st['processes'] or ''} | "
              f"{', '.join(st['runs'])} | {st['reason'][:160].replace('|', '/')} |")
    for sk in r.get("skipped", []):
        print(f"\nSkipped {sk['version']}: {sk['reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
