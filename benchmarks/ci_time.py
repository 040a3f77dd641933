"""How long does CI take here? (issue 45: `.ci/run` on a fresh clone under 10 minutes on the 2-core machine)

Clones the repository's committed HEAD into a scratch directory and runs `bash .ci/run` there, as CI
does (with CI=true, no standard input), timing the whole, the set-up (installs, environments, lint: up to
the end of `lint-imports`, scripts/test.sh's last step before pytest) and the tests, and reading pytest's
own closing line. The per-framework environments are whatever `$DLBENCH_ENVS_DIR` (default
`~/.cache/dlbench/envs`) holds: `--fresh-envs` points it at an empty folder, so they are built from their
locks as on a new machine. `--durations N` has pytest list the N slowest tests (in the log). `--processes`
counts the Python processes the tests start (a `sitecustomize` on PYTHONPATH logs each one's wall time and
the frameworks it imported as it exits) and prints their seconds by what they are, beside the time it takes
this machine to import each framework in a new process: how much of the tests' time is processes
starting and importing. Run it on a quiet machine: it measures wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import ROOT, header

TARGET_MIN = 10.0
#: the frameworks a logged process may import, the most particular first: a process is named by the first of
#: them it imported (ONNX Runtime's and OpenVINO's processes import torch to export a model, Keras's TensorFlow
#: or JAX, so torch, the one most others import, comes last); each is imported alone to time its import
FRAMEWORKS = ("ctranslate2", "llama_cpp", "transformers", "onnxruntime", "openvino", "keras", "tensorflow", "jax",
              "paddle", "mxnet", "chainer", "pytensor", "h2o", "ray", "torch")
#: the logging sitecustomize (--processes): a line per Python process as it exits, forks included (their
#: clock restarts at the fork), os._exit too; a process killed by a signal is not logged
LOGGER = """
import atexit, json, os, sys, time
_t0 = time.time()
_forked = False
def _reset():
    global _t0, _forked
    _t0, _forked = time.time(), True
os.register_at_fork(after_in_child=_reset)
def _log():
    try:
        mods = [m for m in %(frameworks)r if m in sys.modules]
        entry = "fork" if _forked else os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "?"
        if entry in ("-c", "-m", "__main__.py") and len(sys.argv) > 1:
            entry += " " + os.path.basename(sys.argv[1])[:40]
        with open(%(log)r, "a") as f:
            f.write(json.dumps({"s": time.time() - _t0, "entry": entry, "mods": mods,
                                "pytest": "_pytest" in sys.modules and not _forked}) + "\\n")
    except Exception:
        pass
atexit.register(_log)
_exit = os._exit
def _logged_exit(code, _exit=_exit):
    _log()
    _exit(code)
os._exit = _logged_exit
"""


def _cache_state() -> str:
    """How much of a new machine's set-up and first compiles the caches spare: uv's wheel cache (built
    wheels: llama.cpp's), dlbench's own (kept environments, compile caches) and PyTensor's compiled graphs,
    as they stand before the run (a machine started fresh has none)."""
    home_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    uv = Path(os.environ.get("UV_CACHE_DIR") or home_cache / "uv")
    parts = []
    for name, path in (("uv's", uv), ("dlbench's", home_cache / "dlbench"), ("PyTensor's", Path.home() / ".pytensor")):
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) \
            if path.is_dir() else 0
        parts.append(f"{name} {size / 2 ** 20:,.0f} MiB ({path})" if size else f"{name} empty ({path})")
    return "caches at start: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="keep the whole CI output in this file")
    parser.add_argument("--fresh-envs", action="store_true",
                        help="build the per-framework environments into an empty folder (as a new machine does)")
    parser.add_argument("--durations", type=int, default=0, help="have pytest list the N slowest tests (in the log)")
    parser.add_argument("--processes", action="store_true",
                        help="log every Python process the tests start; print their seconds by kind")
    parser.add_argument("--commit", default="HEAD",
                        help="the commit to clone and run (default HEAD): two commits measured back to back")
    args = parser.parse_args()
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "--verify", f"{args.commit}^{{commit}}"],
                          capture_output=True, text=True)
    if done.returncode:
        print(f"ci_time: no commit {args.commit!r} in {ROOT}", file=sys.stderr)
        sys.exit(2)
    commit = done.stdout.strip()
    title = header(f"CI: `.ci/run` on a clean clone (commit {commit})")
    caches = _cache_state()
    with tempfile.TemporaryDirectory(prefix="dlbench-ci-") as tmp:
        clone = Path(tmp) / "dlbench"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
        env = {**os.environ, "CI": "true"}
        if args.fresh_envs:
            env["DLBENCH_ENVS_DIR"] = str(Path(tmp) / "envs")
        if args.durations:
            env["DLBENCH_TEST_ARGS"] = f"--durations={args.durations}"
        log = Path(tmp) / "processes.jsonl"
        if args.processes:
            (Path(tmp) / "logger").mkdir()
            (Path(tmp) / "logger" / "sitecustomize.py").write_text(LOGGER % {"frameworks": FRAMEWORKS, "log": str(log)})
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(tmp) / "logger"), env.get("PYTHONPATH")]))
        cpu0, machine0 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu()
        t0 = time.perf_counter()
        tests_from = None  # when lint-imports, the last step before pytest, ended: the set-up is what came before
        lines = []
        with subprocess.Popen(["bash", ".ci/run"], cwd=clone, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) as proc:
            for line in proc.stdout:
                lines.append(line)
                if tests_from is None and line.startswith("Contracts:"):  # lint-imports' summary, at its exit
                    tests_from = time.perf_counter() - t0
        wall = time.perf_counter() - t0
        cpu1, machine1 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu()
        processes = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    text = "".join(lines)
    if args.log:
        args.log.write_text(text)
    closing = [line for line in text.splitlines() if re.search(r"\b(passed|failed)\b.* in [0-9.]+s", line)]
    print(title)
    print(f"- exit code {proc.returncode}; wall time **{wall / 60:.1f} min** (target < {TARGET_MIN:g} min)"
          + (f": set-up {tests_from / 60:.1f} min, tests {(wall - tests_from) / 60:.1f} min" if tests_from else "")
          + (" (environments built from empty)" if args.fresh_envs else ""))
    if closing:
        print(f"- pytest: `{closing[-1].strip('= ')}`")
    print(f"- {caches}")
    print(f"- {cpu_line(cpu1.ru_utime - cpu0.ru_utime, cpu1.ru_stime - cpu0.ru_stime, machine0, machine1)}")
    envs = [line for line in text.splitlines() if line.startswith("CI: environments")]
    if envs:
        print(f"- {envs[-1][4:]}")
    if args.processes:
        _print_processes(processes, wall)


def machine_cpu() -> dict[str, int]:
    """The machine's CPU time so far, in clock ticks, from /proc/stat's first line (empty elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return {}
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {name: int(value) for name, value in zip(names, fields, strict=False)}


def cpu_line(user_s: float, system_s: float, before: dict[str, int], after: dict[str, int]) -> str:
    """The CPU time the run's processes used (those that ended and were waited for, as the kernel counts a
    process's children), and the share of the machine's time a hypervisor gave to other guests (steal): on a
    shared machine the wall time moves with it, the CPU seconds much less, so two commits are compared on both."""
    line = (f"CPU time of the run's processes: {(user_s + system_s) / 60:.1f} min "
            f"(user {user_s / 60:.1f}, system {system_s / 60:.1f})")
    total = sum(after.values()) - sum(before.values())
    if total > 0 and "steal" in after:
        stolen = 100 * (after["steal"] - before["steal"]) / total
        line += f"; the machine's time stolen by other guests meanwhile: {stolen:.1f}%"
    return line


def _import_seconds(name: str) -> float | None:
    """This machine's wall time to start a Python and import ``name`` alone (None: not importable here)."""
    t0 = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", f"import {name}"], capture_output=True)
    return time.perf_counter() - t0 if done.returncode == 0 else None


def _print_processes(processes: list[dict], wall: float) -> None:
    """The logged processes' seconds by what they were (the entry point and the framework they are named by:
    :data:`FRAMEWORKS`), the largest first, and each framework's import time in a new process beside the
    count of the processes that imported it."""
    # pytest itself and its test processes are the whole run, not processes a test started
    started = [p for p in processes if not p["pytest"]]
    kinds: Counter = Counter()
    seconds: Counter = Counter()
    for p in started:
        key = (p["entry"], p["mods"][0] if p["mods"] else "-")
        kinds[key] += 1
        seconds[key] += p["s"]
    total = sum(seconds.values())
    print(f"\nPython processes the run started and that exited (a process killed by a signal is not logged): "
          f"{sum(kinds.values())}, {total / 60:.1f} min of wall time together (the run's was {wall / 60:.1f} min on "
          f"{len(os.sched_getaffinity(0))} cores). The largest kinds, by the entry point and the framework each "
          "is named by (the most particular it imported: ONNX Runtime's processes import torch too):\n")
    print("| entry point | framework | processes | seconds | seconds a process |")
    print("|---|---|---:|---:|---:|")
    for key, s in seconds.most_common(15):
        print(f"| {key[0]} | {key[1]} | {kinds[key]} | {s:.0f} | {s / kinds[key]:.1f} |")
    by_framework = Counter(fw for p in started for fw in p["mods"])
    timed = {fw: _import_seconds(fw) for fw in by_framework}
    print("\nEach framework's import in a new Python on this machine (one `python -c 'import X'`, wall time), "
          "beside the logged processes that imported it (an estimate of the seconds they spent importing it):\n")
    print("| framework | processes | import | processes x import |")
    print("|---|---:|---:|---:|")
    for fw, n in by_framework.most_common():
        if timed.get(fw) is not None:
            print(f"| {fw} | {n} | {timed[fw]:.1f} s | {n * timed[fw]:.0f} s |")


if __name__ == "__main__":
    main()
