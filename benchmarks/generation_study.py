"""The generation study of docs/generation.md (issue #33): gpt2 and smollm2-135m generating 64 tokens after
a 128-token prompt, at batch 1 and 4, fp32 and bf16, in torch (eager and compile), JAX, TensorFlow, ONNX
Runtime and OpenVINO, every cell behind the generation gate; then what dominates decode time in the slowest
framework (``--profile``), and LoadGen's token-latency Server scenario with ``--find-peak``.

    python benchmarks/update_performance.py generation_study             # the issue's grid (about 40 min on 2 cores)
    python benchmarks/generation_study.py --tiny                         # checks the script runs (minutes)

The protocol is short for a 2-core machine: 2 processes per cell, each generating once untimed and then
``--generations`` (2) times; every figure is a median with its 95% interval over the processes. ``--workdir
DIR`` keeps the database and the finished parts, so an interrupted study resumes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import header, reported_run, study_part
from _common import report_section as section

GRID = ["--scenario", "generate", "--model", "gpt2,smollm2-135m",
        "--framework", "torch,jax,tensorflow,onnxruntime,openvino", "--variant", "eager,compile,jit,function,default",
        "--precision", "fp32,bf16", "--batch", "1,4", "--threads", "2", "--repeats", "2", "--generations", "2"]
TINY = ["--scenario", "generate", "--model", "gpt2", "--framework", "torch,jax", "--precision", "fp32",
        "--batch", "1", "--threads", "2", "--repeats", "2", "--generations", "2", "--prompt-len", "16",
        "--new-tokens", "8"]
#: LoadGen's Server scenario in token-latency mode, bounded by TTFT and TPOT 99th percentiles
SERVER = ["--scenario", "generate-server", "--model", "gpt2", "--framework", "torch", "--threads", "2",
          "--prompt-len", "128", "--new-tokens", "32", "--ttft-ms", "2000", "--tpot-ms", "250", "--find-peak",
          "--loadgen-min-duration", "20", "--loadgen-min-queries", "16"]
TINY_SERVER = [*SERVER[:SERVER.index("--prompt-len")], "--prompt-len", "16", "--new-tokens", "4", "--ttft-ms",
               "2000", "--tpot-ms", "250", "--loadgen-min-duration", "3", "--loadgen-min-queries", "4"]


#: the decoders with a profiler hook (ONNX Runtime's and OpenVINO's profile only their backends' forward)
PROFILED = ("torch", "jax", "tensorflow")


def slowest(results, profiled: bool = False) -> object | None:
    """The fp32 batch-1 cell with the longest TPOT (``profiled``: among the decoders dlbench can profile)."""
    ok = [c for c in results.cells if c.ok and c.cell.precision == "fp32" and c.cell.batch == 1
          and c.cell.metrics.get("generation") and (not profiled or c.cell.framework in PROFILED)]
    return max(ok, key=lambda c: c.cell.metrics["generation"]["tpot_ms"]["median"], default=None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="a tiny grid: checks the script runs")
    ap.add_argument("--workdir", type=Path, help="keep the database and finished parts here (resumable)")
    args = ap.parse_args()
    head = header("Generation: TTFT, TPOT and tokens/s, gated" + (" (tiny)" if args.tiny else ""))
    from dlbench import api

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        grid = TINY if args.tiny else GRID
        run, run_id, md = reported_run(work, "grid", ["run", *grid], db)
        res = api.results(run_id, db)
        overall, worst = slowest(res), slowest(res, profiled=True)
        prof_argv = None
        if worst is not None:
            c = worst.cell
            prof_argv = ["run", "--scenario", "generate", "--model", c.model, "--framework", c.framework, "--variant",
                         c.variant, "--batch", "1", "--threads", str(c.threads), "--repeats", "1", "--generations", "1",
                         "--profile", "20", *(grid[grid.index("--prompt-len"):] if args.tiny else [])]
            prof_db = str(work / "profile.db")  # its own: a run the grid's database holds is not taken for it
            prof = study_part(work / "profile.json", [*prof_argv, "--db", prof_db, "--json"], db=prof_db)
            prof_res = api.results(json.loads(prof["stdout"])["run_id"], prof_db)
        server_argv = ["run", *(TINY_SERVER if args.tiny else SERVER)]
        server, _, server_md = reported_run(work, "server", server_argv, db)

    print(head)
    print(f"- grid: `dlbench run {' '.join(grid)}`: exit code {run['returncode']}, {run['seconds'] / 60:.1f} min")
    ok = [c for c in res.cells if c.ok]
    print(f"- cells: {len(res.cells)} ({len(ok)} ok, each after the generation gate; "
          + ", ".join(f"{c.cell.key}: {c.cell.status}" for c in res.cells if not c.ok)[:1500] + ")\n")
    print(section(md, "Generation"))
    if prof_argv is not None:
        print(f"#### What dominates decode time in the slowest framework ({worst.cell.framework}/{worst.cell.variant}, "
              f"{worst.cell.model}, batch 1, fp32)\n")
        if overall is not worst:
            g = overall.cell.metrics["generation"]["tpot_ms"]
            print(f"(The slowest cell overall is {overall.cell.framework}/{overall.cell.variant} on {overall.cell.model}, "
                  f"TPOT {g['median']:.3g} [{g['ci_low']:.3g}, {g['ci_high']:.3g}] ms, whose decoder has no profiler hook "
                  f"in dlbench; this is the slowest of {', '.join(PROFILED)}.)\n")
        print(f"`dlbench {' '.join(prof_argv)}`: exit code {prof['returncode']}\n")
        pc = next((c for c in prof_res.cells if c.ok), None)
        profile = pc.cell.metrics.get("profile") if pc else None
        if profile and profile.get("kinds"):
            total = profile["self_us_total"] or 1.0
            print(f"{profile['calls']} decode steps under {profile['tool']}; operations summed by kind, by self time.\n")
            print("| kind of operation | share of the profiled steps' self time | calls |\n|---|---:|---:|")
            for op in profile["kinds"][:8]:
                print(f"| `{op['name'][:80]}` | {100 * op['self_us'] / total:.1f}% | {op['calls']} |")
        else:
            print(f"no profile: {(pc.cell.warnings if pc else ['the cell failed'])}")
        print()
    print(f"#### LoadGen, token-latency Server scenario\n\n`dlbench {' '.join(server_argv)}`: exit code "
          f"{server['returncode']}, {server['seconds'] / 60:.1f} min\n")
    try:
        print(section(server_md, "Generation"))
    except ValueError:
        print("(the run has no Generation section)")


if __name__ == "__main__":
    main()
