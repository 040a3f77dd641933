"""torch.profiler over a closure, shared by the torch backend and Keras's ``keras-torch`` variant. It imports
torch when called: a process profiles with the framework it already runs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.measure.profile import ProfileTrace, complete_events, read_trace


def torch_profile(run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
    """torch.profiler over the calls (CUDA kernels too once CUDA is in use, each call synchronised);
    operations are its ``cpu_op`` events (aten::*) and GPU ``kernel`` events."""
    import torch

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    activities = [torch.profiler.ProfilerActivity.CPU, *([torch.profiler.ProfilerActivity.CUDA] if cuda else [])]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            run()
            if cuda:
                torch.cuda.synchronize()
    path = outdir / "trace.json"
    # Kineto writes trace.json.tmp, then renames it to a path it has stripped of newlines: under a
    # directory whose name holds one the rename fails and the .tmp stays. It writes in a directory of
    # our own, with a plain name, and the trace is moved from there.
    with tempfile.TemporaryDirectory(prefix="dlbench-trace-") as tmp:
        prof.export_chrome_trace(str(Path(tmp) / "trace.json"))
        shutil.move(str(Path(tmp) / "trace.json"), path)
    ops = complete_events(read_trace(path), lambda e: e.get("cat") in ("cpu_op", "kernel"))
    return ProfileTrace(path, ops, f"torch.profiler (torch {torch.__version__})")
