"""How long the main environment's install takes with uv and with pip (issue 45: CI's set-up), and whether
the two install the same packages.

Each installer runs once in its own fresh clone of HEAD (``bash scripts/install.sh``, ``DLBENCH_INSTALLER=pip``
for pip), timed end to end; then ``pip freeze`` of the two environments is compared. Both read this
machine's package caches as CI does. Run it on a quiet machine: it measures wall time.

    python benchmarks/install_time.py
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, header

INSTALLERS = ("uv", "pip")


def install(installer: str, where: Path) -> dict:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=where, capture_output=True, text=True,
                          env={**os.environ, "DLBENCH_INSTALLER": installer})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{installer}: the install failed: {done.stderr[-2000:]}")
    freeze = subprocess.run([str(where / ".venv" / "bin" / "python"), "-m", "pip", "freeze", "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    pyc = sum(1 for _ in (where / ".venv").rglob("*.pyc"))
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "freeze": sorted(freeze), "pyc": pyc}


def main() -> None:
    title = header("The main environment's install: uv against pip")
    rows = {}
    for installer in INSTALLERS:
        where = Path(tempfile.mkdtemp(prefix=f"dlbench-install-{installer}-"))
        try:
            rows[installer] = install(installer, where / "clone")
        finally:
            shutil.rmtree(where, ignore_errors=True)
    same = rows["uv"]["freeze"] == rows["pip"]["freeze"]
    print(title)
    print("`bash scripts/install.sh` in a fresh clone of HEAD, once with uv (pip's settings passed by "
          "scripts/uv_args.py, bytecode compiled) and once with pip (`DLBENCH_INSTALLER=pip`); this machine's "
          "package caches as CI has them.\n")
    print("| installer | wall time | CPU time | distributions | compiled modules (.pyc) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall']:.1f} s | {r['cpu']:.1f} s | {len(r['freeze'])} | {r['pyc']} |")
    print(f"\n`pip freeze` of the two environments: {'identical' if same else 'DIFFERENT'}"
          f" ({len(rows['uv']['freeze'])} and {len(rows['pip']['freeze'])} lines); uv took "
          f"{rows['uv']['wall'] / rows['pip']['wall']:.2f}x pip's wall time.")
    if not same:
        diff = sorted(set(rows["uv"]["freeze"]) ^ set(rows["pip"]["freeze"]))
        print("\nDiffering lines: " + ", ".join(f"`{d}`" for d in diff[:20]))


if __name__ == "__main__":
    main()
