"""Helpers for benchmark scripts: the machine's identity and a results block for docs/performance.md."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dlbench(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dlbench ARGV`` in a fresh process of this Python, its output captured (``env``: more variables)."""
    return subprocess.run([sys.executable, "-m", "dlbench", *argv], capture_output=True, text=True,
                          env={**os.environ, **env} if env else None)


def machine() -> str:
    """The CPU with its widest vector extension (the same model name came with AVX2 only one day and
    AVX-512 the next, and MKL's GEMM path differs between them), cores and kernel."""
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
        cpu, flags = info.get("brand_raw", platform.processor()), set(info.get("flags", []))
    except Exception:
        cpu, flags = platform.processor(), set()
    isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2")) if flag in flags), None)
    # the bf16 and int8 units a reduced-precision figure depends on (AMD EPYC: AVX512-BF16; Intel Xeon: AMX)
    extra = [name for flag, name in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-BF16"), ("amx_int8", "AMX-INT8"))
             if flag in flags]
    isa = ", ".join([isa, *extra]) if isa else None
    return (f"{cpu}{f' ({isa})' if isa else ''}, {len(os.sched_getaffinity(0))} usable cores, "
            f"{platform.system()} {platform.release()}")


def command(argv: list[str] | None = None) -> str:
    """The command that ran, as typed from the repository root: the script, and any argument that is
    an absolute path inside the repository, relative to it (a header must not carry the path of the
    checkout it was measured in)."""
    argv = sys.argv if argv is None else argv

    def rel(arg: str, script: bool = False) -> str:
        path = Path(arg)
        if not (script or path.is_absolute()):
            return arg
        try:
            return str(path.resolve().relative_to(ROOT))
        except ValueError:  # a scratch folder of the machine it ran on (--workdir): not the reader's path
            return "DIR" if path.is_absolute() else arg

    return shlex.join(["python", rel(argv[0], script=True), *map(rel, argv[1:])])


def header(title: str) -> str:
    today = datetime.date.today().isoformat()
    cmd = command()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"### {title}\n\n- machine: {machine()}\n- date: {today}\n- command: `{cmd}`\n"
            f"- load average when it started (1, 5, 15 min): {load}\n")


def interleaved(fns: dict, rounds: int, sync=lambda out: None) -> dict[str, list[float]]:
    """Time each callable one step at a time, alternating them, the order reversed every round
    (A B, B A, A B, ...), so that drift of the machine (other load, thermal, allocator state)
    falls on all of them alike; block-wise timing left a few percent of order bias."""
    import time

    names = list(fns)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names if r % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            sync(fns[n]())
            out[n].append(time.perf_counter() - t0)
    return out


def ratio_ci(num: list[float], den: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% interval of median(num) / median(den): how sure a throughput ratio is."""
    import random
    import statistics

    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(num, k=len(num))) / statistics.median(rng.choices(den, k=len(den)))
                    for _ in range(reps))
    return ratios[int(0.025 * reps)], ratios[int(0.975 * reps) - 1]


def study_part(marker: Path, argv: list[str], db: str | None = None) -> dict:
    """One part of a study (a dlbench command), or its stored outcome when a previous attempt finished it
    (``marker`` holds it). A timed run that an earlier attempt left unfinished in ``db`` is resumed (only
    its missing cells are measured); the minutes recorded are then this attempt's."""
    if marker.exists():
        return {**json.loads(marker.read_text()), "read_back": marker.stem}
    if db is not None and Path(db).exists():
        finished = [json.loads(json.loads(m.read_text())["stdout"]) for m in marker.parent.glob("*.json")]
        done = {f["run_id"] for f in finished if isinstance(f, dict)}
        unfinished = [r["id"] for r in json.loads(dlbench("runs", "--db", db, "--json").stdout)
                      if r["id"] not in done]
        if unfinished:  # measured as it was stored: the run's own flags are not given again
            argv = ["run", "--resume", unfinished[-1], "--db", db, *(["--json"] if "--json" in argv else [])]
    t0 = time.perf_counter()
    out = dlbench(*argv)
    part = {"argv": argv, "returncode": out.returncode, "seconds": time.perf_counter() - t0, "stdout": out.stdout}
    if out.returncode not in (0, 1):  # 1: a gate failure or a failed cell, which the study reports
        raise SystemExit(f"dlbench {' '.join(argv)} exited {out.returncode}: {out.stderr[-2000:]}")
    marker.write_text(json.dumps(part))
    return part


def report_section(md: str, title: str) -> str:
    """One ``## title`` section of a report.md, its headings moved down two levels for a fragment."""
    start = md.index(f"## {title}")
    end = md.find("\n## ", start + 3)
    text = md[start:end if end > 0 else None]
    return text.replace("\n### ", "\n##### ").replace(f"## {title}", f"#### {title}", 1)


def reported_run(work: Path, name: str, argv: list[str], db: str) -> tuple[dict, str, str]:
    """A study's ``dlbench run`` (:func:`study_part`: read back or resumed from ``work``), its run id and
    its report.md (``dlbench report`` into ``work/<name>-report``)."""
    part = study_part(work / f"{name}.json", [*argv, "--db", db, "--json"], db=db)
    run_id = json.loads(part["stdout"])["run_id"]
    dlbench("report", run_id, "--db", db, "--out", str(work / f"{name}-report"))
    return part, run_id, (work / f"{name}-report" / "report.md").read_text()
