"""Run the processes of one distributed job (torchrun agents, JAX or TensorFlow workers, a Ray
driver) with a deadline, and turn every way they can end into data.

Each process starts in a session of its own, with a command line naming the job's directory
(unique per job). Ending a job, whichever way it ends: SIGTERM to every group (torchrun stops
its workers on it), a grace period, SIGKILL to every group and to every process whose command
line names the job directory (torchrun's workers and Ray's daemons live in sessions of their own),
then a check that nothing is left; what is left is recorded, never ignored.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.core.job import Job, encode


@dataclass
class Proc:
    """One process of a job: a name (for its log), its argv and its extra environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class GroupOutcome:
    status: str  # ok, failed, timeout
    result: dict[str, Any] | None
    reason: str
    seconds: float
    leftovers: list[int] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)  # every process of the job we know of (all ended)


def procs_naming(marker: str, sessions: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """Live processes whose command line contains ``marker`` or whose session is one of ``sessions``
    (every process of a job starts a session of its own; what it spawns stays there unless it
    starts another session, as torchrun's workers do, whose command lines name the job directory)."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":
            continue
        if marker in cmd or int(fields[3]) in sessions:
            found.append(int(entry.name))
    return found


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def cleanup(procs: list[subprocess.Popen], marker: str, grace_s: float = 5.0) -> list[int]:
    """Stop every process of a job; return the pids still alive afterwards (should be none)."""
    sessions = frozenset(p.pid for p in procs)
    for p in procs:
        if p.poll() is None:
            _signal_group(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or procs_naming(marker, sessions)):
        time.sleep(0.1)
    for p in procs:
        _signal_group(p.pid, signal.SIGKILL)
    for pid in procs_naming(marker, sessions):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
    deadline = time.monotonic() + 5
    while procs_naming(marker, sessions) and time.monotonic() < deadline:
        time.sleep(0.1)
    return procs_naming(marker, sessions)


def run_group(procs: list[Proc], job: Job, job_dir: Path, timeout_s: float, base_env: dict[str, str],
              explain=None, fail_grace_s: float = 20.0) -> GroupOutcome:
    """Write ``job_dir/job.json``, start ``procs``, wait under ``timeout_s``, clean up, and read
    ``job_dir/result.json`` or explain the failure (``explain(job_dir, logs)``)."""
    (job_dir / "job.json").write_text(json.dumps(encode(job)))
    marker = str(job_dir)
    running: list[subprocess.Popen] = []
    logs: list[Path] = []
    started = time.perf_counter()
    try:
        for proc in procs:
            log_path = job_dir / f"log.{proc.name}.txt"
            logs.append(log_path)
            with open(log_path, "wb") as log:
                running.append(subprocess.Popen(proc.argv, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env={**base_env, **proc.env},
                                                start_new_session=True))
        status = _wait(running, started + timeout_s, fail_grace_s)
        codes = {proc.name: p.poll() for proc, p in zip(procs, running, strict=True)}
    except BaseException:
        cleanup(running, marker)
        raise
    leftovers = cleanup(running, marker)
    seconds = time.perf_counter() - started
    pids = [p.pid for p in running] + [int(f.read_text()) for f in job_dir.glob("pid.*") if f.read_text().isdigit()]
    texts = {proc.name: path.read_text(errors="replace")[-20000:]  # keyed as ``codes`` is
             for proc, path in zip(procs, logs, strict=True) if path.exists()}
    explain = explain or explain_errors
    result_path = job_dir / "result.json"
    if status == "ok" and result_path.exists():
        return GroupOutcome("ok", json.loads(result_path.read_text()), "", seconds, leftovers, texts, pids)
    if status == "ok":
        status = "failed"
    cause = explain(job_dir, texts, codes)
    if status == "timeout":
        return GroupOutcome("timeout", None, f"timed out after {timeout_s:g} s" + (f" ({cause})" if cause else ""),
                            seconds, leftovers, texts, pids)
    return GroupOutcome("failed", None, cause or "the job's processes failed without a reason", seconds, leftovers, texts,
                        pids)


def _wait(procs: list[subprocess.Popen], deadline: float, fail_grace_s: float) -> str:
    """ok when every process exits 0; failed once one fails (the others get ``fail_grace_s`` to
    notice and report); timeout at the deadline."""
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return "ok"
        now = time.perf_counter()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if failed_at is not None and (all(c is not None for c in codes) or now - failed_at > fail_grace_s):
            return "failed"
        if now > deadline:
            return "timeout"
        time.sleep(0.1)


def explain_errors(job_dir: Path, logs: dict[str, str], codes: dict[str, int | None] | None = None) -> str:
    """Processes killed by a signal (with their log's last error line: a C++ abort says why there),
    each rank's own error (``error.<rank>.json``, first line), else the last error line of a log."""
    parts = []
    for name, code in (codes or {}).items():
        if code is not None and code < 0:
            last = last_error_line(logs.get(name, ""))
            parts.append(f"{name} {exit_reason(code)}" + (f" ({last})" if last else ""))
    for path in sorted(job_dir.glob("error.*.json")):
        try:
            err = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        parts.append(f"rank {err['rank']}: {err['error'].splitlines()[0][:300]}")
    if not parts:
        for text in logs.values():  # pragma: no branch
            last = last_error_line(text)
            if last:
                parts.append(last)
                break
    return "; ".join(dict.fromkeys(parts))


def last_error_line(text: str) -> str:
    """The last line of a log that looks like an error (a Python exception, a C++ ``what()``)."""
    lines = [ln.strip() for ln in text.splitlines() if re.search(r"Error|error|Killed|what\(\)|terminate called", ln)]
    return lines[-1][:300] if lines else ""


def killed_by(code: int | None) -> signal.Signals | None:
    """The signal a (negative) exit code names, None for a normal exit or an unknown number."""
    if code is None or code >= 0 or -code not in signal.Signals._value2member_map_:
        return None
    return signal.Signals(-code)


def exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    sig = killed_by(code)
    return f"killed by {sig.name}" if sig else f"exited with code {code}"
