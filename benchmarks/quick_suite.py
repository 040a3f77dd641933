"""How long does `dlbench run` with no arguments take here? (issue: measurement; target <= 5 minutes)

Runs the built-in quick suite exactly as a newcomer would (`dlbench run`, every installed
framework) into a scratch database and reports the wall time and the cells' statuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import header


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.db"
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "dlbench", "run", "--db", str(db), "--json"],
                             capture_output=True, text=True)
        wall = time.perf_counter() - t0
        summary = json.loads(out.stdout)
    statuses = Counter()
    frameworks = set()
    for rows in summary["models"].values():
        for r in rows:
            frameworks.add(f"{r['framework']}/{r['variant']}")
            statuses.update(r["statuses"].values())
    print(header("`dlbench run` (the quick suite) end to end"))
    print(f"- frameworks: {', '.join(sorted(frameworks))}")
    print(f"- cells: {sum(statuses.values())} ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))})")
    print(f"- wall time: **{wall / 60:.1f} min** (target <= 5 min); exit code {out.returncode}")
    for f in summary["failed"]:
        print(f"- did not produce a time: `{f['key']}`: {f['status']}: {f['reason'][:200]}")


if __name__ == "__main__":
    main()
