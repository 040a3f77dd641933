"""Single-core float32 GEMM throughput of each installed framework's matrix multiply, and which
BLAS code path it took.

Why: the dense models (fcn-r, the autoencoders, the LSTM's gates) are a few big matrix
multiplies, so a framework's GEMM kernel decides their time. On some CPUs the kernels differ by
2x for reasons outside the framework's own code (MKL, for one, picks its code path by CPU vendor).
This script measures the one shape that dominates fcn-r at its default batch (1024 x 2048 times
2048 x 4096, 17.2 GFLOP) in a fresh process per framework, pinned to one core with every thread
variable at 1, and records what the BLAS library says about itself (``MKL_VERBOSE``,
``threadpoolctl``), so a gap in the side-by-side tables can be traced to its kernel.

    python benchmarks/gemm_probe.py [--repeats 7] [--frameworks numpy,torch,jax,tensorflow]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

from _common import header

M, K, N = 1024, 2048, 4096
FLOP = 2 * M * K * N

# Each snippet defines ``mm()`` (one multiply, finished when it returns) and ``info`` (a string).
SNIPPETS = {
    "numpy": """
import numpy as np
a, b = np.random.rand(M, K).astype(np.float32), np.random.rand(K, N).astype(np.float32)
mm = lambda: a @ b
info = "numpy " + np.__version__ + ": " + blas_info("numpy")
""",
    "torch": """
import torch
torch.set_num_threads(1)
a, b = torch.rand(M, K), torch.rand(K, N)
mm = lambda: torch.mm(a, b)
info = "torch " + torch.__version__ + ": " + mkl_path(torch) + " (BLAS_INFO=" + \
    torch.__config__.show().split("BLAS_INFO=")[1].split(",")[0] + ")"
""",
    "jax": """
import jax, jax.numpy as jnp, numpy as np
a, b = jnp.asarray(np.random.rand(M, K).astype(np.float32)), jnp.asarray(np.random.rand(K, N).astype(np.float32))
f = jax.jit(jnp.matmul)
mm = lambda: f(a, b).block_until_ready()
info = "jax " + jax.__version__ + ": XLA CPU dot (jit)"
""",
    "tensorflow": """
import tensorflow as tf, numpy as np
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
a, b = tf.constant(np.random.rand(M, K).astype(np.float32)), tf.constant(np.random.rand(K, N).astype(np.float32))
mm = lambda: tf.linalg.matmul(a, b).numpy()
info = "tensorflow " + tf.__version__ + ": tf.linalg.matmul (eager)"
""",
}

PRELUDE = """
import json, os, subprocess, sys, time
M, K, N = {M}, {K}, {N}

def blas_info(module):
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    found = [f"{{d.get('internal_api')}} {{d.get('version')}} ({{d.get('architecture') or 'architecture not reported'}})"
             for d in threadpool_info() if d.get('user_api') == 'blas']
    return "; ".join(found) or "no BLAS found by threadpoolctl"

def mkl_path(torch):
    # MKL names the code path it dispatched to in its verbose banner ("... for Intel(R) 64
    # architecture <which> processors"); ask a child process so this one stays quiet.
    code = "import torch; torch.set_num_threads(1); a = torch.rand(8, 8); a @ a"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={{**os.environ, "MKL_VERBOSE": "1"}})
    banner = [ln for ln in out.stdout.splitlines() if "architecture" in ln]
    if not banner:
        return "no MKL banner (not MKL?)"
    return "MKL dispatched to: " + banner[0].split("architecture", 1)[1].split(",")[0].strip()
"""

RUNNER = """
for _ in range(3):
    mm()
times = []
for _ in range({repeats}):
    t0 = time.perf_counter()
    mm()
    times.append(time.perf_counter() - t0)
print(json.dumps({{"times": times, "info": info}}))
"""


def probe(name: str, repeats: int) -> dict:
    """One framework's GEMM timings in a fresh process pinned to one core, or why it could not run."""
    code = PRELUDE.format(M=M, K=K, N=N) + SNIPPETS[name] + RUNNER.format(repeats=repeats)
    env = {**os.environ, **{v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    core = min(os.sched_getaffinity(0))
    out = subprocess.run(["taskset", "-c", str(core), sys.executable, "-c", code], capture_output=True,
                         text=True, env=env, timeout=600)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["exit " + str(out.returncode)])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--frameworks", default=",".join(SNIPPETS))
    args = ap.parse_args()
    names = [n for n in args.frameworks.split(",") if n]
    unknown = [n for n in names if n not in SNIPPETS]
    if unknown:
        raise SystemExit(f"unknown framework(s) {', '.join(unknown)}; known: {', '.join(SNIPPETS)}")
    rows = {}
    for name in names:
        if importlib.util.find_spec(name) is None:
            rows[name] = {"error": "not installed"}
            continue
        rows[name] = probe(name, args.repeats)
    best = max((FLOP / statistics.median(r["times"]) for r in rows.values() if "times" in r), default=None)
    print(header(f"Single-core float32 GEMM, {M}x{K} @ {K}x{N} (fcn-r's largest layer at batch {M})"))
    print("| framework | GFLOP/s (median) | min-max | vs fastest | kernel, as the library reports it |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        if "times" not in r:
            print(f"| {name} | - | - | - | {r['error']} |")
            continue
        g = [FLOP / t / 1e9 for t in r["times"]]
        med = FLOP / statistics.median(r["times"]) / 1e9
        print(f"| {name} | {med:.0f} | {min(g):.0f}-{max(g):.0f} | {med * 1e9 / best:.2f} | {r['info']} |")
    print(f"\n{args.repeats} timed multiplies per framework after 3 untimed, each framework in a fresh process "
          "pinned to one core. A framework's dense-layer cells can be no faster than its row here.")


if __name__ == "__main__":
    main()
