"""What an environment of an older PyTorch release would download here (docs/versions.md): pip resolves
``torch==VERSION`` with its companion pins (``dlbench.envs.companions``) as ``dlbench envs create`` would,
without installing (``pip install --dry-run --report``), and each wheel's size is read from its index
(HTTP ``Content-Length``, or the file's size for a local index).

    python benchmarks/update_performance.py torch_release_size
    python benchmarks/update_performance.py torch_release_size --args "--version 2.6.0"

Why: the registry's Linux wheels of torch releases other than the main Python's are CUDA builds that pull
the NVIDIA libraries; this says how many GB a pinned torch costs before anyone builds one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from _common import header

from dlbench.envs.companions import companions

#: the oldest supported line's first release and a recent one
VERSIONS = ["2.1.0", "2.10.0"]


def wheel_size(url: str) -> int:
    """Bytes of one resolved download, without downloading it."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path)).stat().st_size
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as resp:
        return int(resp.headers["Content-Length"])


def resolve(version: str) -> list[dict]:
    """pip's install report for a fresh environment of ``torch==version`` and its companions."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                              "--report", str(report), *companions("torch", version)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"pip could not resolve torch=={version}: {out.stderr.strip().splitlines()[-1]}")
        return json.loads(report.read_text())["install"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", action="append", help="torch release (repeatable); default: " + ", ".join(VERSIONS))
    args = ap.parse_args()
    head = header("PyTorch releases: what one pinned environment downloads")
    rows = []
    for version in args.version or VERSIONS:
        sizes = {item["metadata"]["name"]: wheel_size(item["download_info"]["url"]) for item in resolve(version)}
        largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        nvidia = sum(b for name, b in sizes.items() if name.lower().startswith(("nvidia-", "triton", "cuda-")))
        rows.append((version, companions("torch", version), len(sizes), sum(sizes.values()), nvidia, largest))
    print(head)
    print("| release | requirements | packages | download, GB | of it CUDA (nvidia-*, triton, cuda-*), GB "
          "| largest three |\n|---|---|---:|---:|---:|---|")
    for version, reqs, n, total, nvidia, largest in rows:
        big = ", ".join(f"{name} {b / 1e9:.2f}" for name, b in largest)
        print(f"| torch {version} | {' '.join(reqs)} | {n} | {total / 1e9:.2f} | {nvidia / 1e9:.2f} | {big} |")
    print("\nSizes are of the compressed wheels pip would fetch (an installed environment is larger).")


if __name__ == "__main__":
    main()
