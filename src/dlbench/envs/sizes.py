"""What a pip install of some requirements fetches, and how many bytes: the basis of an environment build's
time estimate (:func:`dlbench.frameworks.ondemand.estimate_builds`).

A build's time is mostly its packages' bytes: downloaded, unpacked and compiled to bytecode. pip says what
it would install without installing anything (``pip install --dry-run --ignore-installed --report``: the
same resolution, configuration and indexes as the build's own pip); each file's size is then read where
pip would read the file: a local file's from the disk, a remote one's from the server (an HTTP ``HEAD``'s
``Content-Length``, which every index's file host answers). A build records what it installed the same
way (:class:`dlbench.envs.EnvRecord`'s ``wheel_bytes``), so this host's seconds per byte can be learned.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

#: seconds a resolution (pip's) and a size request may take: an estimate never waits on a slow index long
RESOLVE_TIMEOUT_S = 120
HEAD_TIMEOUT_S = 10


class SizeError(Exception):
    """What would be installed could not be said (pip could not resolve; a size could not be read)."""


@dataclass(frozen=True)
class Fetch:
    """One file pip installs: ``local`` when it reads it from this machine's disk (a ``find-links`` folder,
    a ``file://`` index), else it is downloaded (or taken from pip's cache: which, pip does not say)."""

    name: str
    version: str
    url: str
    bytes: int
    local: bool


@dataclass(frozen=True)
class Sizes:
    """The bytes of what an install fetches, and how many of them come over the network."""

    total: int
    network: int
    files: int

    @classmethod
    def of(cls, fetches: list[Fetch]) -> Sizes:
        return cls(sum(f.bytes for f in fetches), sum(f.bytes for f in fetches if not f.local), len(fetches))


def head_size(url: str) -> int:
    """A remote file's size from its server's ``Content-Length``."""
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=HEAD_TIMEOUT_S) as response:  # noqa: S310 (pip's own URL)
            length = response.headers.get("Content-Length")
    except OSError as exc:
        raise SizeError(f"the size of {url} could not be read: {exc}") from None
    if length is None or not length.isdigit():
        raise SizeError(f"{url}: its server gave no size")
    return int(length)


def fetches(report: dict, head: Callable[[str], int] = head_size) -> list[Fetch]:
    """Each file of pip's installation report (``--report``'s ``install`` list), with its size."""
    items = []
    for item in report.get("install", []):
        url = item["download_info"]["url"]
        items.append((item["metadata"]["name"], item["metadata"]["version"], url))

    def size(url: str) -> tuple[int, bool]:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "file":
            path = urllib.request.url2pathname(parsed.path)
            try:
                return (os.path.getsize(path) if os.path.isfile(path) else 0), True  # a local folder: a source tree
            except OSError as exc:
                raise SizeError(f"{path}: {exc}") from None
        return head(url), False

    with ThreadPoolExecutor(max_workers=8) as pool:
        sized = list(pool.map(size, [url for _, _, url in items]))
    return [Fetch(name, version, url, n, local) for (name, version, url), (n, local) in zip(items, sized, strict=True)]


def resolve(pip: list[str], requirements: list[str], head: Callable[[str], int] = head_size) -> Sizes:
    """What ``pip install REQUIREMENTS`` would fetch into an empty environment, and its bytes. ``pip`` is the
    command that would install (``[python, "-m", "pip"]``, with ``--python`` where the build uses it).
    ``DLBENCH_PACKAGE_SIZES=off`` reads nothing (offline, or an index too slow to wait for; the tests)."""
    if os.environ.get("DLBENCH_PACKAGE_SIZES", "").strip().lower() in ("off", "0", "no"):
        raise SizeError("not read (DLBENCH_PACKAGE_SIZES=off)")
    with tempfile.TemporaryDirectory(prefix="dlbench-sizes-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--no-input", "--quiet", "--report", str(report),
               *requirements]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SizeError(f"pip could not resolve {' '.join(requirements)}: {exc}") from None
        if done.returncode != 0 or not report.is_file():
            last = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
            raise SizeError(f"pip could not resolve {' '.join(requirements)}: {last[0].strip()[:300]}")
        try:
            data = json.loads(report.read_text())
        except ValueError as exc:
            raise SizeError(f"pip's report could not be read: {exc}") from None
    return Sizes.of(fetches(data, head))


def report_sizes(report: Path, head: Callable[[str], int] = head_size) -> Sizes | None:
    """The sizes of what a finished install's ``--report`` lists; None where they cannot be read (the
    record then has none, and the estimate learns from the other builds)."""
    try:
        return Sizes.of(fetches(json.loads(report.read_text()), head))
    except (OSError, ValueError, KeyError, TypeError, SizeError):
        return None
