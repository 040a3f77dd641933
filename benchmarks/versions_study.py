"""The study of docs/versions.md: one run over three releases each of JAX, TensorFlow and ONNX Runtime and
two of PyTorch, every version through the gate, then the report's Versions section and, per framework,
``dlbench compare --baseline OLDEST --fail-above 5``.

    python benchmarks/update_performance.py versions_study                 # the issue's run (long)
    python benchmarks/update_performance.py versions_study_torch           # the same, PyTorch's releases only
    python benchmarks/update_performance.py versions_study --args=--quick  # lenet forward, 1 thread, 2 releases each

PyTorch has its own part (``--only torch``) because an older torch here is a CUDA build from the
registry: its environment downloads about 4 GB (docs/performance/torch_release_size.md).

``--workdir DIR`` keeps the database and the finished run there: an interrupted study resumes with
``dlbench run --resume`` and measures only the missing cells.

The pinned releases' environments are built by the run itself when missing (``dlbench envs create``,
about a minute each; ``dlbench envs list`` shows them and their size on disk afterwards). The bare
names are the main Python's releases. Prints the run's command and exit code, the environments used,
the report's Versions section and each comparison, with the largest significant change per framework.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import dlbench, header, study_part

#: oldest release first: each framework's first name is its comparisons' baseline
RELEASES = {"jax": ["jax==0.4.38", "jax==0.6.2", "jax"],
            "tensorflow": ["tensorflow==2.16.2", "tensorflow==2.18.1", "tensorflow"],
            "onnxruntime": ["onnxruntime==1.17.3", "onnxruntime==1.20.1", "onnxruntime"],
            # older PyTorch wheels on the registry are CUDA builds of about 4 GB (docs/versions.md)
            "torch": ["torch==2.10.0", "torch"]}
#: a short protocol (3 processes, 2 warm-up, at least 5 calls and 0.5 s): about 1 h 20 min on a 2-core machine by
#: ``dlbench run --dry-run``; three processes are the fewest the process-level test of ``compare`` works with
FULL = ["--model", "lenet,fcn-r,resnet-56,lstm-imdb", "--scenario", "forward,train_step", "--threads", "1,2",
        "--repeats", "3", "--warmup", "2", "--min-iters", "5", "--min-time", "0.5"]
QUICK_RELEASES = {"jax": ["jax==0.6.2", "jax"], "tensorflow": ["tensorflow==2.16.2", "tensorflow"],
                  "onnxruntime": ["onnxruntime==1.17.3", "onnxruntime"]}
QUICK = ["--model", "lenet", "--scenario", "forward", "--threads", "1", "--repeats", "3", "--min-time", "0.5"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", type=Path, help="keep the database and the finished run here (resumable)")
    ap.add_argument("--only", choices=sorted(RELEASES), help="one framework's releases")
    args = ap.parse_args()
    # the load average before the study, not after
    title = "Framework versions: one figure across releases" + (f", {args.only} only" if args.only else "")
    head = header(title + (" (quick form)" if args.quick else ""))
    releases = QUICK_RELEASES if args.quick else RELEASES
    if args.only:
        releases = {args.only: releases.get(args.only, RELEASES[args.only])}
    frameworks = ",".join(n for names in releases.values() for n in names)
    flags = [*(QUICK if args.quick else FULL), "--framework", frameworks]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        run = study_part(work / "run.json", ["run", *flags, "--db", db, "--json"], db=db)
        run_id = json.loads(run["stdout"])["run_id"]
        env = json.loads(dlbench("export", run_id, "--format", "json", "--db", db).stdout)["environment"]["frameworks"]
        dlbench("report", run_id, "--db", db, "--out", str(work / "report"))
        md = (work / "report" / "report.md").read_text()
        compared = {base: dlbench("compare", run_id, "--baseline", names[0], "--fail-above", "5", "--db", db, "--json")
                    for base, names in releases.items() if len(names) > 1}
        envs_list = json.loads(dlbench("envs", "list", "--json").stdout)["envs"]
    print(head)
    print(f"- `dlbench run {' '.join(flags)}`: exit code {run['returncode']}, {run['seconds'] / 60:.1f} min"
          + (" (read back from the work directory, measured by an earlier invocation)" if "read_back" in run else "")
          + "\n")
    print("| name in the run | version recorded | environment |\n|---|---|---|")
    by_name = {e["framework"]: e for e in envs_list}
    for name in (n for names in releases.values() for n in names):
        where = by_name[name]["path"].rsplit("/", 1)[-1] if name in by_name else "the main Python"
        print(f"| {name} | {env.get(name) or 'not installed'} | {where} |")
    print()
    if "## Versions" in md:
        section = md[md.index("## Versions"):]
        section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
        print(section.replace("## Versions", "#### The report's Versions section", 1).replace("\n### ", "\n##### "))
    for base, out in compared.items():
        data = json.loads(out.stdout) if out.stdout.strip() else {"comparisons": [], "failures": [out.stderr.strip()]}
        print(f"#### `dlbench compare {run_id} --baseline {releases[base][0]} --fail-above 5` (exit {out.returncode})\n")
        changes = [m for c in data["comparisons"] for m in c["matched"] if m["significant"]]
        for c in data["comparisons"]:
            for m in c["matched"]:
                mark = m["verdict"] if m["significant"] else "same"
                print(f"- {c['run_b'].split(' ', 1)[1]} vs {releases[base][0]}: {m['key']}: B/A {m['ratio']:.3f} "
                      f"[{m['ci_low']:.3f}, {m['ci_high']:.3f}], p={m['p_value']:.2g}: {mark}")
        if changes:
            top = max(changes, key=lambda m: abs(m["change_pct"]))
            print(f"\nLargest significant change: {top['key']} {top['change_pct']:+.1f}% (p={top['p_value']:.2g}).")
        print()


if __name__ == "__main__":
    main()
