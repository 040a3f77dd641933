"""Run the survey's live checks, each in fresh worker processes, and judge what they recorded.

A check result is a plain dict: ``status`` (verified, failed, not_verified, not_applicable),
``what`` (the one line saying what ran), ``evidence`` (what the processes reported) and
``reason`` when not verified. Nothing is verified unless a process actually ran it here.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dlbench.launch.subprocess import run_job
from dlbench.survey.catalog import Target
from dlbench.survey.probes import has_check

#: largest |framework output - ONNX Runtime output| accepted as the same function (float32)
ONNX_TOL = 1e-4
#: largest parameter / loss difference accepted between resumed and uninterrupted training
RESUME_TOL = 1e-6
TRAIN_STEPS = 6
WORLD = 2
#: what rank values the all-reduce must produce, when it is not 1 + 2 + ... + world
EXPECTED_ALLREDUCE = {"keras": 0.5}
#: Keras's ONNX export depends on the backend; try each
KERAS_BACKENDS = ("torch", "jax", "tensorflow")

Progress = Callable[[str], None]


def _result(status: str, what: str, evidence: Any = None, reason: str = "") -> dict[str, Any]:
    return {"status": status, "what": what, "evidence": evidence, "reason": reason}


def _job(target: Target, check: str, timeout: float, env: dict[str, str] | None = None, threads: int | None = None,
         **extra) -> tuple[dict | None, str]:
    job = {"kind": "survey", "task": "probe", "framework": target.name, "check": check, "threads": threads, **extra}
    outcome = run_job(job, timeout, threads=threads, extra_env={**target.env, **(env or {})})
    if outcome.status != "ok":
        return None, f"{outcome.status}: {outcome.reason}"
    return outcome.result, ""


def free_ports(n: int) -> list[int]:
    """Ports free on 127.0.0.1 now (released before the workers bind them)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --- the checks ---------------------------------------------------------------------------
def check_forward(target: Target, timeout: float = 300) -> tuple[dict, dict]:
    """CPU and GPU cells from one forward process."""
    res, err = _job(target, "forward", timeout)
    if res is None:
        return (_result("failed", "LeNet forward in a fresh process", reason=err),
                _result("not_verified", "GPU visibility asked in the forward process", reason=f"forward failed: {err}"))
    cpu = res.get("cpu", {})
    cpu_cell = _result("verified", cpu.get("what", "LeNet forward"), res) if cpu else \
        _result("failed", "LeNet forward", res, "the probe returned no CPU result")
    if res.get("cuda"):
        gpu_cell = _result("verified", res["cuda"]["what"] + " on " + res["cuda"].get("device_name", "GPU"), res)
    else:
        gpu_cell = _result("not_verified", "GPU visibility asked in the forward process", res,
                           "no GPU visible to the framework on this machine")
    return cpu_cell, gpu_cell


def check_onnx(target: Target, timeout: float = 600) -> dict:
    backends = KERAS_BACKENDS if target.name == "keras" else (None,)
    attempts, verified = [], None
    for backend in backends:
        env = {"KERAS_BACKEND": backend} if backend else None
        res, err = _job(target, "onnx_export", timeout, env=env)
        label = f"keras {backend} backend" if backend else target.name
        if res is None:
            attempts.append({"run": label, "status": "failed", "reason": err})
        elif res.get("not_verified"):
            attempts.append({"run": label, "status": "not_verified", "reason": res["not_verified"]})
        else:
            ok = res["max_abs_diff"] <= ONNX_TOL
            attempts.append({"run": label, "status": "verified" if ok else "failed", **res})
            if ok and verified is None:
                verified = res
    what = "export LeNet, run it in ONNX Runtime, compare with the framework's own output"
    if verified:
        return _result("verified", f"{verified['exporter']}; ONNX Runtime {verified['onnxruntime']}; "
                                   f"max |diff| {verified['max_abs_diff']:.1e}", attempts)
    status = "failed" if any(a["status"] == "failed" for a in attempts) else "not_verified"
    return _result(status, what, attempts, "; ".join(f"{a['run']}: {a['reason']}" for a in attempts if a.get("reason")))


def check_checkpoint(target: Target, timeout: float = 600) -> dict:
    """Train 6 steps uninterrupted; train 3, save, and in a NEW process load and train 3 more."""
    what = (f"LeNet SGD {TRAIN_STEPS} steps uninterrupted vs {TRAIN_STEPS // 2} + save, then load in a new process "
            f"+ {TRAIN_STEPS // 2}")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="dlbench-ckpt-") as tmp:
        for phase in ("uninterrupted", "save", "resume"):
            res, err = _job(target, "train", timeout, threads=1, phase=phase, dir=tmp, steps=TRAIN_STEPS)
            if res is None:
                return _result("failed", what, runs, f"{phase}: {err}")
            runs[phase] = res
        from dlbench.frameworks.probing import compare_params

        params = compare_params(runs["uninterrupted"]["params_file"], runs["resume"]["params_file"])
    half = TRAIN_STEPS // 2
    tail = runs["uninterrupted"]["losses"][half:]
    loss_diff = max(abs(a - b) for a, b in zip(tail, runs["resume"]["losses"], strict=True))
    evidence = {"pids": {k: v["pid"] for k, v in runs.items()}, "api": runs["resume"].get("api"),
                "losses": {k: v["losses"] for k, v in runs.items()}, "params": params, "max_loss_diff": loss_diff}
    if runs["save"]["pid"] == runs["resume"]["pid"]:
        return _result("failed", what, evidence, "save and resume ran in the same process")
    if not params["same_names"] or params["max_abs_diff"] > RESUME_TOL or loss_diff > RESUME_TOL:
        return _result("failed", what, evidence, f"resumed run differs: params {params['max_abs_diff']}, "
                                                 f"loss {loss_diff:.2e}")
    return _result("verified", f"{evidence['api']}; resumed in pid {runs['resume']['pid']} (saved in pid "
                               f"{runs['save']['pid']}); max |param diff| {params['max_abs_diff']:.1e} over "
                               f"{params['values']:,} values", evidence)


def check_allreduce(target: Target, timeout: float = 300) -> dict:
    """Two worker processes on 127.0.0.1, rank r contributing r + 1."""
    ports = free_ports(WORLD)
    expected = EXPECTED_ALLREDUCE.get(target.name, float(sum(range(1, WORLD + 1))))
    with ThreadPoolExecutor(WORLD) as pool:
        futures = [pool.submit(_job, target, "allreduce", timeout, None, 1, rank=r, world=WORLD, ports=ports)
                   for r in range(WORLD)]
        outs = [f.result() for f in futures]
    what = f"{WORLD}-process all-reduce on 127.0.0.1"
    errors = [f"rank {r}: {err}" for r, (res, err) in enumerate(outs) if res is None]
    if errors:
        return _result("failed", what, None, "; ".join(errors))
    ranks = [res for res, _ in outs]
    if any(r.get("not_verified") for r in ranks):
        return _result("not_verified", what, ranks, ranks[0].get("not_verified", ""))
    evidence = {"ranks": ranks, "expected": expected}
    values = [r["value"] for r in ranks]
    if len({r["pid"] for r in ranks}) != WORLD or any(abs(v - expected) > 1e-6 for v in values):
        return _result("failed", what, evidence, f"values {values}, expected {expected} on every rank")
    return _result("verified", f"{ranks[0]['api']}; {WORLD} processes (pids {', '.join(str(r['pid']) for r in ranks)})"
                               f" each got {values[0]:g}", evidence)


def run_all(target: Target, progress: Progress | None = None) -> dict[str, dict]:
    """Every live check the target's probe defines: cell name -> result."""
    say = progress or (lambda _msg: None)
    cells: dict[str, dict] = {}
    if has_check(target.name, "forward"):
        say(f"{target.name}: forward")
        cells["cpu"], cells["gpu"] = check_forward(target)
    if has_check(target.name, "onnx_export"):
        say(f"{target.name}: ONNX export")
        cells["onnx_export"] = check_onnx(target)
    if has_check(target.name, "train"):
        say(f"{target.name}: checkpoint and restart")
        cells["fault_tolerance"] = check_checkpoint(target)
        if cells["fault_tolerance"]["status"] == "verified":
            cells["single_node"] = _result("verified", "LeNet trained on this machine (checkpoint check)")
    if has_check(target.name, "allreduce"):
        say(f"{target.name}: 2-process all-reduce")
        cells["distributed"] = check_allreduce(target)
    return cells
