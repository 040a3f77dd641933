"""``dlbench survey --check-installable``: can the papers' frameworks still be installed here?

For each historical framework with a pip name, ``pip download --no-deps`` is run into a scratch
directory with this Python. The exact outcome is recorded: the file pip fetched (with the name,
summary and licence in its own metadata, so a same-named but unrelated package shows itself),
or pip's own last error line. Frameworks that were never pip packages (Lua, Java, Scala) are
recorded as such, with no error claimed. The results are written to ``data/installable.yaml``
with the date, and the feature matrix reads them from there.
"""

from __future__ import annotations

import datetime as dt
import email.parser
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import yaml

from dlbench.core.outputs import write_file
from dlbench.survey.catalog import INSTALLABLE_FILE, clear_cache

#: pip distribution tried for each historical framework, and whether that PyPI project is known
#: to be the framework's own (True), known not to be (False: the name is taken by another
#: package), or not established (None). Never a pip package: (None, why).
PIP_NAMES: dict[str, tuple[str | None, bool | None | str]] = {
    "caffe": ("caffe", False),  # PyPI 'caffe' is a placeholder package (its own summary says so)
    "caffe2": ("caffe2", None),
    "neon": ("nervananeon", None),
    "theano": ("Theano", True),
    "torch7": (None, "Lua library (installed with luarocks), not a pip package"),
    "cntk": ("cntk", True),
    "mxnet": ("mxnet", True),
    "chainer": ("chainer", True),
    "deeplearning4j": (None, "Java library (Maven artifacts), not a pip package"),
    "h2o": ("h2o", True),
    "graphlab": ("GraphLab-Create", None),
    "caffeonspark": (None, "Scala/Spark package (built with Maven), not a pip package"),
    "paddlepaddle": ("paddlepaddle", True),
    "eblearn": (None, "C++ library, not a pip package"),
}

def _metadata(path: Path) -> dict[str, str]:
    """Name, version, summary, licence and home page from a wheel's METADATA or an sdist's PKG-INFO."""
    text = ""
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
                text = z.read(name).decode("utf-8", "replace")
        elif path.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as t:
                member = min((m for m in t.getmembers() if m.name.endswith("PKG-INFO")), key=lambda m: m.name.count("/"))
                text = t.extractfile(member).read().decode("utf-8", "replace")
        elif path.suffix == ".zip":
            with zipfile.ZipFile(path) as z:
                name = min((n for n in z.namelist() if n.endswith("PKG-INFO")), key=lambda n: n.count("/"))
                text = z.read(name).decode("utf-8", "replace")
    except (StopIteration, ValueError, OSError, zipfile.BadZipFile, tarfile.TarError):
        return {}
    msg = email.parser.Parser().parsestr(text)
    licence = msg.get("License-Expression") or msg.get("License") or ""
    classifiers = [c for c in msg.get_all("Classifier") or [] if c.startswith("License")]
    return {"name": msg.get("Name", ""), "version": msg.get("Version", ""), "summary": msg.get("Summary", ""),
            "licence": (licence.strip().splitlines() or [""])[0][:200], "licence_classifiers": classifiers,
            "home_page": msg.get("Home-page", "") or next((v.split(",", 1)[-1].strip() for v in
                                                           msg.get_all("Project-URL") or []), "")}


def _last_error(text: str) -> str:
    """pip's own error line, with the underlying exception when a build step failed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    main = next((ln for ln in reversed(lines) if ln.startswith(("ERROR:", "error:"))), lines[-1] if lines else "")
    cause = next((ln for ln in reversed(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception): ", ln)), None)
    return f"{main} (cause: {cause})" if cause and cause not in main else main

def check(pip_name: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``pip download --no-deps`` for one distribution into a scratch directory."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
           "-d", "DIR", pip_name]
    with tempfile.TemporaryDirectory(prefix="dlbench-pipdl-") as tmp:
        cmd[cmd.index("DIR")] = tmp
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"pip_name": pip_name, "status": "timeout", "error": f"pip download timed out after {timeout:g} s"}
        seconds = round(time.perf_counter() - started, 1)
        files = sorted(Path(tmp).iterdir())
        shown = " ".join(c if c != tmp else "<tmpdir>" for c in cmd[2:])
        if proc.returncode != 0 or not files:
            text = proc.stderr or proc.stdout
            return {"pip_name": pip_name, "command": f"python -m {shown}", "status": "not_installable",
                    "returncode": proc.returncode, "error": _last_error(text), "seconds": seconds,
                    "stderr_tail": [ln.rstrip() for ln in text.splitlines() if ln.strip()][-12:]}
        f = files[0]
        return {"pip_name": pip_name, "command": f"python -m {shown}", "status": "downloadable",
                "file": f.name, "bytes": f.stat().st_size, "kind": "wheel" if f.suffix == ".whl" else "sdist",
                "metadata": _metadata(f), "seconds": seconds,
                "note": "downloaded for this Python; installing (building an sdist) was not attempted"}


def check_all(keys: list[str] | None = None, path: Path = INSTALLABLE_FILE, progress=print) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, (pip_name, official) in PIP_NAMES.items():
        if keys and key not in keys:
            continue
        if pip_name is None:
            results[key] = {"pip_name": None, "status": "not_a_pip_package", "note": official}
            continue
        progress(f"pip download --no-deps {pip_name}")
        results[key] = {**check(pip_name), "official": official}
    pip_version = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout
    data = {"date": dt.date.today().isoformat(), "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}", "pip": pip_version.split(" from ")[0].strip(),
            "index": "PyPI (the machine's pip configuration)", "frameworks": results}
    header = ("# Measured by `dlbench survey --check-installable` on the date below: the outcome of\n"
              "# `pip download --no-deps` for each of the papers' frameworks, with pip's exact error line.\n"
              "# Re-run the command to refresh it; do not edit by hand.\n")
    write_file(path, header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=200))
    clear_cache()
    return data
