"""The study of docs/explain.md: a layers run, the probe attached to it, and the two explanations the
issue asks for (torch vs TensorFlow on fcn-r's forward; torch vs JAX on resnet-56's gradient).

    python benchmarks/update_performance.py explain_study                 # the issue's run (long)
    python benchmarks/update_performance.py explain_study_t1              # its 1-thread half
    python benchmarks/update_performance.py explain_study --args=--quick  # fcn-r and resnet-56, 1 thread

The issue's run (4 models x 4 frameworks x 1,2 threads) at a short protocol takes about 3 h 10 min on
a 2-core machine by ``dlbench run --dry-run``; ``--threads N`` measures one thread count of it as a run
of its own (about half), and ``--workdir DIR`` keeps the database there so an interrupted study
resumes (``dlbench run --resume``) on the same machine. ``--quick``: one run per explanation (fcn-r in
torch and TensorFlow, resnet-56 in torch and JAX), 1 thread, one process per cell of at least 0.5 s
of sampling. ``--only MODEL``: one explanation's run (its model and two frameworks) at the full
protocol, ``--threads`` 1 or 2; ``--profile CALLS`` profiles every cell of the runs (``dlbench run
--profile``), so each explanation names the whole model's top operations. Prints the explanations,
the probe and the report's per-part tables.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import dlbench, header, study_part

#: the issue's run at a short protocol (3 processes, 2 warm-up, at least 5 calls and 0.5 s), as in versions_study
PROTOCOL = ["--repeats", "3", "--warmup", "2", "--min-iters", "5", "--min-time", "0.5"]
FULL = ["--model", "fcn-r,resnet-56,lstm-imdb,alexnet-r", "--framework", "torch,jax,tensorflow,onnxruntime", *PROTOCOL]
#: the issue's two explanations: (frameworks A,B, model, scenario)
EXPLAIN = [("torch,tensorflow", "fcn-r", "forward"), ("torch,jax", "resnet-56", "gradient")]
#: --quick: one run per explanation, of its model and two frameworks only, 1 thread, 1 process per cell
QUICK = ["--threads", "1", "--repeats", "1", "--min-time", "0.5"]


def main() -> None:
    from dlbench.engines.probe import ProbeRow, attach

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", choices=["1", "2", "1,2"], default="1,2", help="the full run's thread counts")
    ap.add_argument("--workdir", type=Path, help="keep the database and the finished runs there (resumable)")
    ap.add_argument("--only", choices=[model for _, model, _ in EXPLAIN], help="one explanation, full protocol")
    ap.add_argument("--profile", type=int, metavar="CALLS", help="profile every cell over CALLS calls")
    args = ap.parse_args()
    explain = [e for e in EXPLAIN if args.only in (None, e[1])]
    # the load average before the study, not after
    part = f", {args.threads} thread(s)" if args.threads != "1,2" and not args.quick else ""
    part += f", {args.only} only" if args.only else ""
    head = header("Where the time goes: layers, probe and explain" + part + (" (quick form)" if args.quick else ""))
    profile = ["--profile", str(args.profile)] if args.profile else []
    if args.quick:
        runs = [[*QUICK, "--model", model, "--framework", pair, *profile] for pair, model, _ in explain]
    elif args.only:
        runs = [[*PROTOCOL, "--threads", args.threads, "--model", model, "--framework", pair, *profile]
                for pair, model, _ in explain]
    else:
        runs = [[*FULL, "--threads", args.threads, *profile]]
    frameworks = ",".join(dict.fromkeys(fw for pair, _, _ in explain for fw in pair.split(","))) \
        if args.quick or args.only else "torch,jax,tensorflow,onnxruntime"
    threads = "1" if args.quick else args.threads
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        done = [study_part(work / f"run{i}.json", ["run", "--scenario", "layers", *flags, "--db", db, "--json"], db=db)
                for i, flags in enumerate(runs)]
        wall = sum(d["seconds"] for d in done)
        run_ids = [json.loads(d["stdout"])["run_id"] for d in done]
        probe = dlbench("probe", "--framework", frameworks, "--threads", threads, "--attach", run_ids[0], "--db", db,
                        "--json")
        found = json.loads(probe.stdout)
        for run_id in run_ids[1:]:
            attach(db, run_id, [ProbeRow(**r) for r in found["rows"]], found["run_id"])
        explained = [dlbench("explain", run_ids[min(i, len(run_ids) - 1)], "--framework", pair, "--model", model,
                             "--scenario", scenario, "--db", db) for i, (pair, model, scenario) in enumerate(explain)]
        sections = []
        for run_id in run_ids:
            dlbench("report", run_id, "--db", db, "--out", str(work / "report" / run_id))
            md = (work / "report" / run_id / "report.md").read_text()
            if "## Where the time goes" in md:
                section = md[md.index("## Where the time goes"):]
                sections.append(section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section)
    print(head)
    for flags, d in zip(runs, done, strict=True):
        print(f"- `dlbench run --scenario layers {' '.join(flags)}`: exit code {d['returncode']}"
              + (" (read back from the work directory, measured by an earlier invocation)" if "read_back" in d else ""))
    print(f"- {len(runs)} run(s) in {wall / 60:.1f} min; `dlbench probe --framework {frameworks} --threads {threads} "
          f"--attach RUN`: exit code {probe.returncode}\n")
    for (pair, model, scenario), out in zip(explain, explained, strict=True):
        print(f"`dlbench explain RUN --framework {pair} --model {model} --scenario {scenario}` (exit {out.returncode}):\n")
        print("```\n" + (out.stdout.strip() or out.stderr.strip()) + "\n```\n")
    print("| framework | probe | scenario | threads | ms | GFLOP/s | kernels |\n|---|---|---|---:|---:|---:|---|")
    for r in found["rows"]:
        ms = f"{r['median_ms']:.4g}" if r["median_ms"] is not None else r["status"]
        gf = f"{r['gflops']:.1f}" if r["gflops"] else "–"
        print(f"| {r['framework']} | {r['probe']} | {r['scenario']} | {r['threads']} | {ms} | {gf} | {r['kernels']} |")
    print()
    for section in sections:
        print(section.replace("## Where the time goes", "#### Per-part tables", 1).replace("\n### ", "\n##### "))


if __name__ == "__main__":
    main()
