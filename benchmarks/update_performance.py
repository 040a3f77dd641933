"""Run benchmark scripts and rebuild docs/performance.md from what they print.

Every figure in docs/performance.md comes from here: each script's Markdown output is saved as
docs/performance/<script>.md (with the machine, date and command in its header), and the page is
the concatenation of those fragments. Re-running one script replaces only its fragment:

    python benchmarks/update_performance.py harness_overhead fidelity_torch
    python benchmarks/update_performance.py --all

Never run it while other heavy work shares the machine: the scripts measure time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
FRAGMENTS = DOCS / "performance"
ORDER = ["harness_overhead", "quick_suite", "fidelity_torch", "fidelity_jax", "fidelity_tensorflow",
         "fidelity_transformers", "fidelity_keras_hub",
         "compare_selfcheck", "gemm_probe", "side_by_side_backends", "side_by_side_compile", "side_by_side_environments",
         "side_by_side_h2o", "ray_fanout", "serving_study", "explain_study", "profile_overhead", "precision_study",
         "versions_study", "torch_release_size", "versions_study_torch", "explain_study_t1", "explain_study_t2",
         "jax_layout_profile", "explain_fcnr_t1", "explain_resnet56_t1", "bootstrap_speed", "trust_figures",
         "ci_time", "install_time", "env_builds", "bisect_jax", "bisect_jax_faster", "adaptive_study",
         "adaptive_study_quick",
         "planner_simulation", "adaptive_study_precision", "estimate_accuracy", "build_estimate", "peak_check",
         "quick_suite_growth", "noise_remedies", "transformers_study",
         "transformers_study_t1", "serving_study_bert",
         "generation_study", "generate_vs_transformers", "convergence_genesis", "quality_genesis", "quality_speed_genesis"]

INTRO = """# Performance of dlbench itself

Targets from the issues, checked by the scripts in `benchmarks/`. Each section below was written
by `python benchmarks/update_performance.py <script>` from the script's own output: the machine,
date and command are in its header. Timings on a shared machine are noisy: the scripts compare
ratios measured in one process or one run, never absolute times across runs. Each header also gives
the load average when the script started: a load above the number of cores means other processes
competed for the CPU, and the figures then say little about the target.

The fidelity scripts time the two versions step by step in alternation (order reversed every
round), with the same weights in both, and give a bootstrap interval of the ratio. The first torch
figure (0.937, then 0.963 on a quiet machine) came from block-wise timing with the plain model on
PyTorch's default initialisation: with the same weights and alternation the two are equal within
noise (profiles of both show the same kernels; ours uses the fused SGD, the plain loop the foreach
one).
"""


#: fragments that are one part of a study's script: name -> (script, its arguments)
PARTS = {"versions_study_torch": ("versions_study.py", ["--only", "torch"]),
         "explain_study_t1": ("explain_study.py", ["--threads", "1"]),
         "explain_study_t2": ("explain_study.py", ["--threads", "2"]),
         "explain_fcnr_t1": ("explain_study.py", ["--threads", "1", "--only", "fcn-r", "--profile", "2"]),
         "explain_resnet56_t1": ("explain_study.py", ["--threads", "1", "--only", "resnet-56", "--profile", "2"]),
         "bisect_jax_faster": ("bisect_jax.py", ["--faster"]),
         "transformers_study_t1": ("transformers_study.py", ["--threads", "1"]),
         "adaptive_study_quick": ("adaptive_study.py", ["--only", "quick", "--max-time", "60"]),
         # issue 45's re-run of the precision workload with the planner on an upper bound of the pilot's variance
         "adaptive_study_precision": ("adaptive_study.py", ["--only", "precision", "--protocols", "fixed,target",
                                                            "--max-time", "60"]),
         "serving_study_bert": ("serving_study.py", ["--quick", "--model", "bert-base:seq_len=384", "--framework",
                                                     "torch,onnxruntime,openvino", "--threads", "2",
                                                     "--latency-calls", "100"])}


def _command(name: str, extra: list[str]) -> tuple[Path, list[str]]:
    """A fragment's script and arguments: ``side_by_side_backends`` is ``side_by_side.py backends`` (which
    passes what follows ``--`` to dlbench run), a part is its script with the part's arguments (PARTS)."""
    if name.startswith("side_by_side_"):
        return HERE / "side_by_side.py", [name.removeprefix("side_by_side_"), *(["--", *extra] if extra else [])]
    if name in PARTS:
        script, preset = PARTS[name]
        return HERE / script, [*preset, *extra]
    return HERE / f"{name}.py", extra


def run(name: str, extra: list[str]) -> None:
    script, args = _command(name, extra)
    if not script.exists():
        raise SystemExit(f"no benchmark {script}")
    print(f"running {name} ...", file=sys.stderr)
    # from the repository root, by its relative path: the header quotes the command as run
    root = HERE.parent
    out = subprocess.run([sys.executable, str(script.relative_to(root)), *args], cwd=root, capture_output=True,
                         text=True)
    if out.returncode:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"{name} failed with exit code {out.returncode}")
    FRAGMENTS.mkdir(parents=True, exist_ok=True)
    (FRAGMENTS / f"{name}.md").write_text(out.stdout.strip() + "\n")


def assemble() -> None:
    parts = [INTRO]
    names = [n for n in ORDER if (FRAGMENTS / f"{n}.md").exists()]
    names += sorted(p.stem for p in FRAGMENTS.glob("*.md") if p.stem not in ORDER)
    for name in names:
        parts.append((FRAGMENTS / f"{name}.md").read_text())
    missing = [n for n in ORDER if n not in names]
    if missing:
        parts.append("## Not yet measured\n\n" + "\n".join(f"- `benchmarks/{n}.py`" for n in missing) + "\n")
    (DOCS / "performance.md").write_text("\n".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--args", default="", help="extra arguments passed to every script")
    args = ap.parse_args()
    # --all: every script once (a part repeats a study that is in ORDER whole)
    names = [n for n in ORDER if n not in PARTS and _command(n, [])[0].exists()] if args.all else args.names
    for name in names:
        run(name, args.args.split())
    assemble()


if __name__ == "__main__":
    main()
