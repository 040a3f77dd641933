"""The survey's live checks: framework-specific code, one probe module per framework folder.

A probe module is imported only inside a fresh worker process (``python -m dlbench.worker``), so
the CLI never imports a framework. Its framework's declaration lists the checks it defines
(``probe_checks``, read without importing it; a missing one means that check has no live test for the
framework and the feature matrix keeps the declared value), and the module maps each to its function
in ``CHECKS``:

* ``forward(job)``: LeNet forward on the CPU (and on a GPU when one is visible); a device entry that
  holds its output on ``probing.reference_case()`` is compared here with the float64 reference;
* ``onnx_export(job)``: export LeNet, run it in ONNX Runtime, compare with the framework's output;
* ``train(job)``: LeNet SGD steps for the checkpoint/restart check (phases below);
* ``allreduce(job)``: one rank of a 2-process all-reduce.

A framework's probe is its folder's ``probe.py`` (``dlbench/frameworks/NAME/probe.py``), named by
its declaration (``probe``); a plug-in's declaration names its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlbench import frameworks
from dlbench.frameworks.declaration import PROBE_CHECKS
from dlbench.frameworks.probing import OUTPUT, reference_case

CHECKS = PROBE_CHECKS


def has_check(framework: str, check: str) -> bool:
    """Whether the framework's declaration lists ``check`` among its probe's (False: not a framework
    dlbench knows)."""
    return check in frameworks.probe_checks(framework)


def run_probe(job: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: import the framework's probe module and run one check its declaration lists."""
    framework, check = job["framework"], job["check"]
    if not has_check(framework, check):
        raise ValueError(f"{framework}'s probe declares no {check!r} check "
                         f"(it declares: {', '.join(frameworks.probe_checks(framework)) or 'none'})")
    return compared_with_reference(frameworks.load_part(framework, "probe").CHECKS[check](job))


def compared_with_reference(result: dict[str, Any]) -> dict[str, Any]:
    """A check's result with each device entry's output on the reference case (a forward check's) replaced by
    the largest difference from the float64 reference (the gate's, a layer above the probes: asked here)."""
    entries = [e for e in result.values() if isinstance(e, dict) and OUTPUT in e]
    if entries:
        from dlbench.gate.reference import forward

        spec, weights, batch = reference_case()
        reference, _ = forward(spec, weights, batch)
        for entry in entries:
            entry["max_abs_diff_vs_numpy_reference"] = float(np.abs(np.asarray(entry.pop(OUTPUT)) - reference).max())
    return result
