"""How long does CI take here? (issue: keep `.ci/run` on a clean clone under 20 minutes on a 2-core machine)

Clones the repository's committed HEAD into a scratch directory and runs `bash .ci/run` there, as CI
does (with CI=true, no standard input), timing the whole and reading pytest's own closing line.
The per-framework environments are whatever `~/.cache/dlbench/envs` holds (CI's machine keeps them
between runs; `envs create` reuses an environment whose recipe is unchanged), and pip reuses its
download cache, as on CI's machine. Run it on a quiet machine: it measures wall time.
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

TARGET_MIN = 20.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="keep the whole CI output in this file")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    title = header(f"CI: `.ci/run` on a clean clone (commit {commit})")
    with tempfile.TemporaryDirectory(prefix="dlbench-ci-") as tmp:
        clone = Path(tmp) / "dlbench"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        t0 = time.perf_counter()
        out = subprocess.run(["bash", ".ci/run"], cwd=clone, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, env={**os.environ, "CI": "true"})
        wall = time.perf_counter() - t0
    text = out.stdout + out.stderr
    if args.log:
        args.log.write_text(text)
    closing = [line for line in text.splitlines() if re.search(r"\b(passed|failed)\b.* in [0-9.]+s", line)]
    print(title)
    print(f"- exit code {out.returncode}; wall time **{wall / 60:.1f} min** (target < {TARGET_MIN:g} min)")
    if closing:
        print(f"- pytest: `{closing[-1].strip('= ')}`")
    envs = [line for line in text.splitlines() if line.startswith("CI: environments")]
    if envs:
        print(f"- {envs[-1][4:]}")


if __name__ == "__main__":
    main()
