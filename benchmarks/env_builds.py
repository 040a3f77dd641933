"""Build time and disk of the five per-framework environments, built from empty, before and after locks
(docs/environments.md, issue 41): "before" is ``dlbench envs create`` of an older commit (pip installing
each recipe's pins into a venv made by ``python -m venv``), "after" is this checkout's (``uv venv``, then
``uv pip sync --require-hashes`` of each recipe's lock). Each pass builds the five one after another into
an empty environments folder, with a package cache of its own: first empty (everything downloaded), then
the same cache again (what a second build on one machine costs).

    python benchmarks/update_performance.py env_builds
    python benchmarks/update_performance.py env_builds --args "--before 6b244fb --work /tmp/envbench"

Disk is counted in allocated blocks, each inode once within what is counted: uv hard-links the
environments' files to its cache, so an environment and the cache share their bytes; "envs + cache"
counts both together. A pass already measured in ``--work`` is read back, not built again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from _common import ROOT, header

FRAMEWORKS = ["mxnet", "chainer", "pytensor", "paddle", "h2o"]
BEFORE = "6b244fb"  # the last commit before the locks


def disk(*paths: Path) -> int:
    """Bytes allocated to the files below ``paths``, each inode counted once (hard links share theirs)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in paths:
        for root, dirs, files in os.walk(path):
            for name in files + dirs:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def checkout(ref: str, dest: Path) -> Path:
    """``src`` and ``pyproject.toml`` of ``ref`` (what ``envs create`` runs from), unpacked into ``dest``."""
    if not (dest / "src").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = dest / "src.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref, "src", "pyproject.toml"],
                       check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
        archive.unlink()
    return dest


def one_pass(name: str, src: Path, work: Path, cache_env: dict[str, str]) -> dict:
    marker = work / f"{name}.json"
    if marker.exists():
        return json.loads(marker.read_text())
    envs_dir = Path(tempfile.mkdtemp(prefix=f"{name}-envs-", dir=work))
    env = {**os.environ, **cache_env, "DLBENCH_ENVS_DIR": str(envs_dir),
           "PYTHONPATH": os.pathsep.join([str(src / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    rows = {}
    for fw in FRAMEWORKS:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "dlbench", "envs", "create", fw], env=env, capture_output=True,
                             text=True)
        seconds = time.perf_counter() - t0
        err = [ln for ln in out.stderr.splitlines() if ln.startswith("dlbench:")]
        rows[fw] = {"seconds": seconds, "ok": out.returncode == 0, "error": err[0][:300] if err else "",
                    "disk": disk(envs_dir / fw)}
    caches = [Path(v) for v in cache_env.values()]
    result = {"pass": name, "frameworks": rows, "envs_disk": disk(envs_dir), "cache_disk": disk(*caches),
              "together_disk": disk(envs_dir, *caches), "load": os.getloadavg()}
    marker.write_text(json.dumps(result))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=BEFORE, help=f"the commit whose envs create is 'before' (default {BEFORE})")
    ap.add_argument("--work", default=None, help="folder for the passes (kept; default: a new temporary one)")
    ap.add_argument("--only", choices=("before", "after"), help="measure only these passes (no table)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="env-builds-"))
    work.mkdir(parents=True, exist_ok=True)
    head = header("Per-framework environments from empty: pip before the locks, uv from the locks")
    before = checkout(args.before, work / "before-src")
    passes = []
    if args.only in (None, "before"):
        pip_cache = str(work / "pip-cache")
        passes.append(one_pass("before-pip-cold", before, work, {"PIP_CACHE_DIR": pip_cache}))
        passes.append(one_pass("before-pip-warm", before, work, {"PIP_CACHE_DIR": pip_cache}))
    if args.only in (None, "after"):
        uv_cache = str(work / "uv-cache")
        passes.append(one_pass("after-uv-cold", ROOT, work, {"UV_CACHE_DIR": uv_cache}))
        passes.append(one_pass("after-uv-warm", ROOT, work, {"UV_CACHE_DIR": uv_cache}))
    if args.only:
        print(json.dumps(passes, indent=1))
        return
    labels = {"before-pip-cold": f"before ({args.before}: pip), empty pip cache",
              "before-pip-warm": "before, pip cache of the pass above",
              "after-uv-cold": "after (locks: uv), empty uv cache", "after-uv-warm": "after, uv cache of the pass above"}
    print(head)
    print("The machine was shared with other work while this ran (its load average is above its cores): the "
          "seconds are rough, good for the order of magnitude only. Each environment is built alone "
          "(one `dlbench envs create` after another), into an empty environments folder.\n")
    print("| pass | " + " | ".join(FRAMEWORKS) + " | all five, s | envs, MB | cache, MB | envs + cache, MB |")
    print("|---|" + "---:|" * (len(FRAMEWORKS) + 4))
    for p in passes:
        cells = [f"{r['seconds']:.0f} s" + ("" if r["ok"] else " (failed)") for r in p["frameworks"].values()]
        total = sum(r["seconds"] for r in p["frameworks"].values())
        print(f"| {labels[p['pass']]} | " + " | ".join(cells) +
              f" | {total:.0f} | {p['envs_disk'] / 1e6:.0f} | {p['cache_disk'] / 1e6:.0f} | "
              f"{p['together_disk'] / 1e6:.0f} |")
    print("\nSize of each environment (MB, its own folder; uv's files are hard links into its cache):\n")
    print("| pass | " + " | ".join(FRAMEWORKS) + " |\n|---|" + "---:|" * len(FRAMEWORKS))
    for p in passes:
        print(f"| {labels[p['pass']]} | " + " | ".join(f"{r['disk'] / 1e6:.0f}" for r in p["frameworks"].values())
              + " |")
    both = [fw for fw in FRAMEWORKS if all(p["frameworks"][fw]["ok"] for p in passes)]
    print(f"\nThe {len(both)} environments every pass built ({', '.join(both)}) take " + "; ".join(
        f"{sum(p['frameworks'][fw]['disk'] for fw in both) / 1e6:.0f} MB ({labels[p['pass']]})" for p in passes) + ".")
    print("\npip installed some wheels from this machine's local indexes (its pip configuration names "
          "`/opt/pypi`, `/opt/pypi-more` and `/opt/wheels`) and downloaded the rest; uv reads no pip configuration "
          "and downloaded every package from PyPI. pip wrote no HTTP cache here (its cache held only Chainer's "
          "built wheel), so its second pass downloaded again. Both compile bytecode at install "
          "(uv: `--compile-bytecode`).")
    failed = {f"{labels[p['pass']]}: {fw}": r["error"] for p in passes for fw, r in p["frameworks"].items()
              if not r["ok"]}
    if failed:
        print("\nFailed builds:\n")
        for what, error in failed.items():
            print(f"- {what}: `{error}`")
    print("\nLoad average (1, 5, 15 min) after each pass: " +
          "; ".join(f"{labels[p['pass']]}: " + ", ".join(f"{x:.1f}" for x in p["load"]) for p in passes) + ".")


if __name__ == "__main__":
    main()
