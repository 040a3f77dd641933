"""Run one job in a fresh Python process, with a timeout, and turn any way it can end into data.

The job is a JSON file the worker (:mod:`dlbench.worker`) reads; its result is a JSON file it
writes. Frameworks print freely to stdout and stderr, so neither carries the result; their tail
becomes the reason when the process dies. A process killed by SIGKILL without our timeout is
reported as a likely out-of-memory kill. A worker dies with the driver that started it
(:func:`exit_with_driver`), so even a SIGKILLed driver leaves no worker measuring on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.core.job import Job, SurveyJob, encode

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
#: the pid of the driver that started a worker (see exit_with_driver)
DRIVER_ENV = "DLBENCH_DRIVER_PID"
PR_SET_PDEATHSIG = 1


@dataclass
class JobOutcome:
    status: str  # ok, failed, timeout
    result: dict[str, Any] | None
    reason: str
    seconds: float
    returncode: int | None
    pid: int | None = None  # also the process-group id: the job ran in its own session


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment that limits every common threading runtime to ``threads`` before import."""
    env = dict(os.environ)
    if threads:
        for key in THREAD_ENV:
            env[key] = str(threads)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()[-limit:].decode("utf-8", "replace")
    except OSError:
        return ""
    return data


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Killed" in ln:
            return ln[:500]
    return lines[-1][:500] if lines else ""


def run_job(job: Job | dict[str, Any], timeout_s: float, threads: int | None = None, python: str | None = None,
            extra_env: dict[str, str] | None = None) -> JobOutcome:
    """Run ``job`` in ``python -m dlbench.worker``; never raises for what the job does. A plain dict is
    a survey's payload (:class:`~dlbench.core.job.SurveyJob`), pinned to ``threads``."""
    if not isinstance(job, Job):
        job = SurveyJob(threads=threads, payload=job)
    with tempfile.TemporaryDirectory(prefix="dlbench-job-") as tmp:
        tmpdir = Path(tmp)
        job_path, result_path, log_path = tmpdir / "job.json", tmpdir / "result.json", tmpdir / "log.txt"
        job_path.write_text(json.dumps(encode(job)))
        env = thread_env(threads)
        if python:
            from dlbench.envs import worker_env

            env.update(worker_env(python))
        if extra_env:
            env.update(extra_env)
        env[DRIVER_ENV] = str(os.getpid())
        cmd = [python or sys.executable, "-m", "dlbench.worker", str(job_path), str(result_path)]
        started = time.perf_counter()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return JobOutcome("timeout", None, f"timed out after {timeout_s:g} s", time.perf_counter() - started, None,
                                  proc.pid)
            except BaseException:
                _kill_group(proc)
                raise
        seconds = time.perf_counter() - started
        _kill_group(proc)  # children the job left behind
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        if rc == 0 and result is not None:
            return JobOutcome("ok", result, "", seconds, rc, proc.pid)
        log_text = _tail(log_path)
        if result is not None and result.get("error"):
            reason = result["error"]
        elif rc == -signal.SIGKILL or rc == 137:
            reason = "killed by SIGKILL (out of memory?)"
        elif rc is not None and rc < 0:
            reason = f"crashed with signal {signal.Signals(-rc).name}"
        else:
            reason = f"exited with code {rc}: {_last_error_line(log_text)}"
        return JobOutcome("failed", result, reason, seconds, rc, proc.pid)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def exit_with_driver() -> None:
    """Called first in a worker: have the kernel SIGKILL it when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``). A driver ended by SIGKILL cannot stop its worker, which measured on,
    orphaned, beside whatever ran next; a driver already gone before this call ends the worker here."""
    driver = os.environ.get(DRIVER_ENV)
    if not driver or not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(driver) and not _running(int(driver)):  # it died before the call: we were re-parented
        os.kill(os.getpid(), signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
