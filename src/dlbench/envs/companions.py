"""What a pinned framework version needs beside it: the companion packages of each release line.

A version spec (``jax==0.4.38``, see :mod:`dlbench.versions`) gets an environment of its own, and
the framework alone does not make a working one: JAX needs the Flax and Optax of its time (a newer
Flax requires a newer JAX), TensorFlow the Keras 3 release published with it and the NumPy it was
built against, ONNX Runtime dlbench's exporter (torch, onnx, onnxscript) and the NumPy of its ABI.
dlbench resolves these from the table below, so a user names only the framework's version.

Each line covers the releases from its ``first`` up to the next line's (the last line: every later
release, which pip then resolves or refuses with its own reason). ``{v}`` in a pin is the pinned
version itself (jaxlib is released in lockstep with jax). A version below a framework's first line
is refused with the line's ``before`` reason. The pins are those each release's own metadata and
release notes name; docs/versions.md says which ones were built and gated on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Line", "LINES", "BEFORE", "DISTRIBUTION", "release_key", "line_for", "companions", "pinnable", "register"]


@dataclass(frozen=True)
class Line:
    first: str  # the line's oldest release
    pins: tuple[str, ...]  # companion requirements; ``{v}`` is the pinned version
    note: str = ""


#: the distribution a pin installs (TensorFlow: the CPU wheel, as the main install does)
DISTRIBUTION = {"jax": "jax", "tensorflow": "tensorflow-cpu", "onnxruntime": "onnxruntime", "torch": "torch"}

# ONNX Runtime's environments export with the same torch, onnx and onnxscript as the main install, so
# every ONNX Runtime release runs the very same graph (torch 2.13.0 is the CPU wheel this machine has;
# the registry's other torch releases are CUDA builds that pull several GB: docs/versions.md).
_TORCH_EXPORT = ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2")

LINES: dict[str, tuple[Line, ...]] = {
    "jax": (
        Line("0.4.30", ("jaxlib=={v}", "flax==0.10.2", "optax==0.2.4", "numpy==2.1.3"),
             "the last 0.4.x releases; Flax 0.10 (nnx.split hands out VariableState copies)"),
        Line("0.5.0", ("jaxlib=={v}", "flax==0.10.4", "optax==0.2.4", "numpy==2.2.6")),
        Line("0.6.0", ("jaxlib=={v}", "flax==0.11.2", "optax==0.2.5", "numpy==2.2.6"),
             "Flax 0.11: the State holds the module's own Variables"),
        Line("0.7.0", ("jaxlib=={v}", "flax==0.11.2", "optax==0.2.5", "numpy==2.3.5")),
        Line("0.8.0", ("jaxlib=={v}", "flax==0.12.0", "optax==0.2.6", "numpy==2.3.5")),
        Line("0.9.0", ("jaxlib=={v}", "flax==0.12.6", "optax==0.2.7", "numpy==2.4.6")),
        Line("0.10.0", ("jaxlib=={v}", "flax==0.12.8", "optax==0.2.8", "numpy==2.4.6")),
    ),
    "tensorflow": (
        Line("2.16.1", ("keras==3.3.3", "numpy==1.26.4"), "the first release on Keras 3; built against NumPy 1"),
        Line("2.17.0", ("keras==3.4.1", "numpy==1.26.4")),
        Line("2.18.0", ("keras==3.6.0", "numpy==2.0.2"), "the first release built against NumPy 2"),
        Line("2.19.0", ("keras==3.8.0", "numpy==2.1.3")),
        Line("2.20.0", ("keras==3.11.3", "numpy==2.2.6")),
        Line("2.21.0", ("keras==3.15.1", "numpy==2.4.6")),
    ),
    "onnxruntime": (
        Line("1.17.0", (*_TORCH_EXPORT, "numpy==1.26.4"), "built against NumPy 1"),
        Line("1.19.0", (*_TORCH_EXPORT, "numpy==2.1.3"), "the first release built against NumPy 2"),
        Line("1.21.0", (*_TORCH_EXPORT, "numpy==2.2.6")),
        Line("1.23.0", (*_TORCH_EXPORT, "numpy==2.3.5")),
        Line("1.26.0", (*_TORCH_EXPORT, "numpy==2.4.6")),
    ),
    "torch": (
        Line("2.1.0", ("numpy==1.26.4",), "built against NumPy 1"),
        Line("2.3.0", ("numpy==2.0.2",), "the first release built against NumPy 2"),
        Line("2.6.0", ("numpy==2.2.6",)),
        Line("2.9.0", ("numpy==2.4.6",)),
    ),
}

#: why releases before a framework's first line are refused
BEFORE = {
    "jax": "JAX before 0.4.30 predates the Flax NNX API (nnx.split/merge, nnx.RNN) the backend is written in",
    "tensorflow": ("TensorFlow before 2.16 ships Keras 2 (tf.keras), and the backend builds its models with Keras 3 "
                   "layers; 2.16 is the first release on Keras 3"),
    "onnxruntime": "ONNX Runtime before 1.17 cannot run the opset-18 graphs torch's exporter writes",
    "torch": "PyTorch before 2.1 has no torch.export, which the backend's compile variant and the ONNX export use",
}

_RELEASE = re.compile(r"([0-9]+(?:\.[0-9]+)*)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?(?:\.dev([0-9]+))?")


def release_key(version: str) -> tuple:
    """A sortable key of a release (``0.4.38``, ``2.16.0rc1``, ``0.9.0.1``); ValueError when it is not one."""
    m = _RELEASE.fullmatch(version)
    if m is None:
        raise ValueError(f"{version!r} is not a release number (like 0.4.38)")
    nums, pre, pre_n, post, dev = m.groups()
    parts = tuple(int(p) for p in nums.split("."))
    parts += (0,) * (4 - len(parts)) if len(parts) < 4 else ()
    # a dev release before its pre-releases, pre-releases before the release, post-releases after it
    stage = (-1 if dev is not None and pre is None else {"a": 0, "b": 1, "rc": 2}.get(pre or "", 3))
    return parts, stage, int(pre_n or 0), int(post) if post is not None else -1, int(dev or 0)


def pinnable() -> list[str]:
    """Frameworks whose version can be pinned."""
    return list(LINES)


def line_for(framework: str, version: str) -> Line:
    """The release line of ``version``; ValueError (with the reason) below the first one."""
    lines = LINES[framework]
    key = release_key(version)
    if key < release_key(lines[0].first):
        raise ValueError(f"{framework} {version} is older than the oldest release dlbench supports "
                         f"({lines[0].first}): {BEFORE[framework]}")
    return [line for line in lines if release_key(line.first) <= key][-1]


def companions(framework: str, version: str) -> list[str]:
    """The requirements of ``framework==version``'s environment: the framework first, then its line's pins."""
    line = line_for(framework, version)
    return [f"{DISTRIBUTION[framework]}=={version}", *(p.format(v=version) for p in line.pins)]


def register(framework: str, distribution: str, lines: tuple[Line, ...], before: str) -> None:
    """Make a plugin's framework pinnable (``fakerel==1.3``): its pip distribution, its release lines and
    why releases before the first are refused. A plugin calls this when it is imported, so every process
    that loads it (``DLBENCH_PLUGINS``) knows the lines."""
    LINES[framework] = tuple(lines)
    DISTRIBUTION[framework] = distribution
    BEFORE[framework] = before
