"""The issues' side-by-side runs, end to end, as a docs/performance.md fragment.

Each preset is the `dlbench run` command(s) an issue's "done when" names; the script runs them into one
database (``--db``, kept so an interrupted preset can be finished with ``--resume``), then prints the
wall time, every cell's status and a markdown table of the summary: per model, one row per framework,
variant and thread count, with the median per-batch times, the whole-data-set samples/s (H2O) and the
compile cold/warm first calls.

    python benchmarks/side_by_side.py backends -- --repeats 1 --warmup 3 --min-iters 5 --min-time 0.3
    python benchmarks/side_by_side.py environments
    python benchmarks/side_by_side.py h2o
    python benchmarks/side_by_side.py compile -- --repeats 1

Arguments after ``--`` are added to every `dlbench run` of the preset (the protocol, usually).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from _common import header

PRESETS: dict[str, dict] = {
    "backends": {  # issue: backends, done when
        "title": "torch, JAX, TensorFlow and ONNX Runtime side by side",
        "runs": [["--framework", "torch,jax,tensorflow,onnxruntime", "--model", "lenet,fcn-r,alexnet-r,resnet-56,lstm-imdb",
                  "--scenario", "forward,gradient,train_step,compile", "--threads", "1,2"]],
    },
    "compile": {  # issue: backends, item 6: the JIT paths that `backends` (first variants only) leaves out
        "title": "compile time of torch.compile, TF XLA and Keras 3 (first call in a fresh process, cold / warm cache)",
        "runs": [["--framework", fw, "--variant", v, "--model", "lenet,resnet-56", "--scenario", "compile",
                  "--threads", "all"]
                 for fw, v in (("torch", "compile"), ("tensorflow", "xla"), ("keras", "all"))],
    },
    "environments": {  # issue: every framework of the papers, done when
        "title": "torch, MXNet, Chainer, PyTensor and PaddlePaddle side by side",
        "runs": [["--framework", "torch,mxnet,chainer,pytensor,paddle", "--model", "lenet,fcn-r",
                  "--scenario", "forward,gradient"]],
    },
    "h2o": {  # issue: every framework of the papers, done when
        "title": "H2O-3 training and prediction throughput",
        "runs": [["--framework", "h2o", "--model", "fcn-r"]],
    },
}


def _fmt_ms(d: dict | None) -> str:
    return "" if not d else f"{d['median']:.3g} [{d['ci_low']:.3g}, {d['ci_high']:.3g}]"


def _fmt_compile(c: dict | None) -> str:
    if not c:
        return ""
    return "; ".join(f"{k} {v.get('cold', float('nan')) / 1e3:.3g}/{v.get('warm', float('nan')) / 1e3:.3g} s"
                     for k, v in c.items())


def table(summary: dict) -> list[str]:
    lines = ["| model | framework/variant | threads | batch | forward ms | gradient ms | train_step ms | "
             "epoch / predict samples/s | compile cold/warm | gate |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, rows in summary["models"].items():
        for r in rows:
            dataset = " / ".join(f"{r[k]:.3g}" for k in ("epoch_samples_per_s", "predict_samples_per_s")
                                 if r.get(k) is not None)
            lines.append(f"| {model} | {r['framework']}/{r['variant']} | {r['threads']} | {r['batch']} | "
                         f"{_fmt_ms(r.get('forward_ms'))} | {_fmt_ms(r.get('gradient_ms'))} | "
                         f"{_fmt_ms(r.get('train_step_ms'))} | {dataset} | {_fmt_compile(r.get('compile_ms'))} | "
                         f"{r['verified']} |")
    return lines


def run_preset(name: str, db: Path, extra: list[str], resume: list[str]) -> tuple[float, list[dict], list[int]]:
    summaries, codes = [], []
    t0 = time.perf_counter()
    for i, args in enumerate(PRESETS[name]["runs"]):
        cmd = [sys.executable, "-m", "dlbench", "run", *args, *extra, "--db", str(db), "--json"]
        if i < len(resume) and resume[i]:
            cmd += ["--resume", resume[i]]
        print(f"running: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        codes.append(out.returncode)
        if not out.stdout.strip():
            print(out.stderr, file=sys.stderr)
            raise SystemExit(f"side_by_side: `dlbench run` printed no summary (exit {out.returncode})")
        summaries.append(json.loads(out.stdout))
    return time.perf_counter() - t0, summaries, codes


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("--db", default="side-by-side.db", help="results database (kept; default ./side-by-side.db)")
    p.add_argument("--resume", default="", help="comma-separated run ids, one per run of the preset, to finish")
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    head = header(PRESETS[args.preset]["title"])  # the load average before the runs, not after
    wall, summaries, codes = run_preset(args.preset, Path(args.db), extra,
                                        args.resume.split(",") if args.resume else [])
    print(head)
    statuses: Counter = Counter()
    for s in summaries:
        for rows in s["models"].values():
            for r in rows:
                statuses.update(r["statuses"].values())
    print(f"- runs: {', '.join(s['run_id'] for s in summaries)} (exit codes {', '.join(map(str, codes))})")
    print(f"- cells: {sum(statuses.values())} ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))})")
    print(f"- wall time of this invocation: {wall / 60:.1f} min"
          + (" (finishing stored runs: earlier cells' time not included)" if args.resume else ""))
    print("- times: median ms per batch [95% CI]; compile: each closure's first call, cold / warm cache\n")
    for s in summaries:
        print("\n".join(table(s)))
        for f in s["failed"]:
            print(f"- no time ({f['status']}): `{f['key']}`: {f['reason'][:160]}")
        for f in s.get("unsupported", []):
            print(f"- unsupported: `{f['key']}`: {f['reason'][:160]}")
        print()


if __name__ == "__main__":
    main()
