"""Helpers for benchmark scripts: the machine's identity and a results block for docs/performance.md."""

from __future__ import annotations

import datetime
import os
import platform
import sys


def machine() -> str:
    try:
        import cpuinfo

        cpu = cpuinfo.get_cpu_info().get("brand_raw", platform.processor())
    except Exception:
        cpu = platform.processor()
    return f"{cpu}, {len(os.sched_getaffinity(0))} usable cores, {platform.system()} {platform.release()}"


def header(title: str) -> str:
    today = datetime.date.today().isoformat()
    cmd = "python " + " ".join(sys.argv)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"### {title}\n\n- machine: {machine()}\n- date: {today}\n- command: `{cmd}`\n"
            f"- load average when it started (1, 5, 15 min): {load}\n")
