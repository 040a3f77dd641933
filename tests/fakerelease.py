"""A framework published as releases on a local package index, for ``dlbench bisect``'s planted tests.

``fakerel`` is a plugin framework (loaded through ``DLBENCH_PLUGINS``, so every measuring process has
it) whose releases are versions of the distribution ``dlbench-fakerel``. The backend is the same for
every release; what changes between releases is the release's own code, as with a real framework:
the package's ``work()`` sleeps from the planted slow release on, and its ``scale()`` returns a wrong
factor from the planted wrong release on (which the gate must catch). The forward pass is the NumPy
reference's (:func:`dlbench.gate.reference.forward`), so every release passes the gate unless planted.

:func:`make_index` writes the wheels into a ``--find-links`` directory; a test points pip at it with
``PIP_NO_INDEX=1`` and ``PIP_FIND_LINKS`` (pip's own configuration), so ``dlbench bisect`` lists,
installs and measures the releases through its real code path: ``pip index versions``, one
environment per release built by :func:`dlbench.envs.create`, the gate and the process-level test.
A release can be planted uninstallable (it requires a distribution the index does not have). The
wheels carry a ``.pth`` file naming this Python's site-packages, so an environment finds NumPy
without an index that has it.
"""

from __future__ import annotations

import base64
import hashlib
import site
import zipfile
from pathlib import Path

from dlbench.envs import companions
from dlbench.frameworks import FrameworkInfo

DISTRIBUTION = "dlbench-fakerel"
FRAMEWORK_INFO = FrameworkInfo("fakerel", __file__, DISTRIBUTION, "dlbench_fakerel", ("default",),
                               "test double: a tiny framework published as releases on a local index",
                               closures=("forward",))
companions.register("fakerel", DISTRIBUTION, (companions.Line("1.0.0", ()),), "fakerel's first release is 1.0")


def _backend():
    import dlbench_fakerel
    import numpy as np

    from dlbench.frameworks.base import Backend, UnsupportedError
    from dlbench.gate import reference

    class FakeRelease(Backend):
        name = "fakerel"
        closures = ("forward",)
        forward_only_reason = "fakerel is forward-only (a test double)"

        def set_threads(self, n):
            return {"threads": n}

        def build(self, spec, weights, device="cpu", variant=None):
            return spec, weights

        def place(self, batch, model):
            return batch

        def forward(self, model, batch):
            spec, weights = model

            def run():
                out = reference.forward(spec, weights, batch)[0] * dlbench_fakerel.scale()
                dlbench_fakerel.work()
                return out
            return run

        def gradient(self, model, batch):
            raise UnsupportedError("fakerel is forward-only")

        def train_step(self, model, batch, opt):
            raise UnsupportedError("fakerel is forward-only")

        def sync(self, out):
            pass

        def to_numpy(self, out):
            return np.asarray(out, dtype=np.float32)

        def param_count(self, model):
            return model[0].param_count

        def get_params(self, model):
            return dict(model[1].params)

        def loss_and_grads(self, model, batch):
            raise UnsupportedError("fakerel is forward-only")

    return FakeRelease


def __getattr__(name):
    if name == "Backend_":
        return _backend()
    raise AttributeError(name)


# --- the local index ------------------------------------------------------------------------------
def _wheel(directory: Path, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    dist = DISTRIBUTION.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    entries = {**files,
               f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires),
               f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: dlbench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, text in entries.items():
            data = text.encode()
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def make_index(directory: Path, versions: list[str], slow_from: str | None = None, wrong_from: str | None = None,
               uninstallable: tuple[str, ...] = (), sleep_s: float = 0.004) -> Path:
    """Wheels of ``versions`` in ``directory``: from ``slow_from`` on, ``work()`` sleeps ``sleep_s`` per call;
    from ``wrong_from`` on, ``scale()`` is 1.01 (the gate's 1e-4 forward tolerance fails it); each of
    ``uninstallable`` requires a distribution no index has."""
    from packaging.version import Version

    directory.mkdir(parents=True, exist_ok=True)
    here = "\n".join(site.getsitepackages()) + "\n"
    for v in versions:
        slow = slow_from is not None and Version(v) >= Version(slow_from)
        wrong = wrong_from is not None and Version(v) >= Version(wrong_from)
        code = (f"import time\nVERSION = {v!r}\n\n\ndef work():\n"
                + (f"    time.sleep({sleep_s})\n" if slow else "    pass\n")
                + f"\n\ndef scale():\n    return {1.01 if wrong else 1.0}\n")
        _wheel(directory, v, {"dlbench_fakerel/__init__.py": code, "dlbench_fakerel_site.pth": here},
               ("dlbench-fakerel-missing-dependency==1.0",) if v in uninstallable else ())
    return directory
