"""How long does CI take here? (issue 45: `.ci/run` on a fresh clone under 10 minutes on the 2-core machine)

Clones the repository's committed HEAD into a scratch directory and runs `bash .ci/run` there, as CI
does (with CI=true, no standard input), timing the whole, the set-up (installs, environments, lint: up to
the end of `lint-imports`, scripts/test.sh's last step before pytest) and the tests, and reading pytest's
own closing line. The per-framework environments are whatever `$DLBENCH_ENVS_DIR` (default
`~/.cache/dlbench/envs`) holds: `--fresh-envs` points it at an empty folder, so they are built from their
locks as on a new machine. `--durations N` has pytest list the N slowest tests (in the log). Run it on a
quiet machine: it measures wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, header

TARGET_MIN = 10.0


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
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    title = header(f"CI: `.ci/run` on a clean clone (commit {commit})")
    caches = _cache_state()
    with tempfile.TemporaryDirectory(prefix="dlbench-ci-") as tmp:
        clone = Path(tmp) / "dlbench"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {**os.environ, "CI": "true"}
        if args.fresh_envs:
            env["DLBENCH_ENVS_DIR"] = str(Path(tmp) / "envs")
        if args.durations:
            env["DLBENCH_TEST_ARGS"] = f"--durations={args.durations}"
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
    envs = [line for line in text.splitlines() if line.startswith("CI: environments")]
    if envs:
        print(f"- {envs[-1][4:]}")


if __name__ == "__main__":
    main()
