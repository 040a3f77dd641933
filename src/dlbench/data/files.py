"""Finding and reading a data set's files under the user's ``--data-dir``; every failure is a DataError."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path

from dlbench.data.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"


def data_root(data_dir: str | Path | None, dataset: str) -> Path:
    """The user's data directory as a Path; it must exist (we never download)."""
    if data_dir is None or str(data_dir) == "":
        raise DataError(f"{dataset}: no data directory given (pass --data-dir; see docs/data.md for the layout)")
    root = Path(data_dir).expanduser()
    if not root.exists():
        raise DataError(f"{root}: no such directory (expected the {dataset} files under it; see docs/data.md)")
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (expected the {dataset} files under it; see docs/data.md)")
    return root


def find_dir(root: Path, subdirs: Sequence[str], marker: str, dataset: str) -> Path:
    """The first of ``root/subdir`` (in order) that holds ``marker``: a data set may sit in its own
    sub-directory (as its archive unpacks) or directly in ``root``."""
    tried = [root / s if s else root for s in subdirs]
    for d in tried:
        if (d / marker).exists():
            return d
    where = ", ".join(str(d / marker) for d in tried)
    raise DataError(f"{dataset}: file not found; looked for {where}")


def find_file(directory: Path, names: Sequence[str], what: str) -> Path:
    """The first existing ``directory/name``; an error lists every name tried."""
    for name in names:
        path = directory / name
        if path.is_file():
            return path
    raise DataError(f"{directory}: missing {what} (expected one of: {', '.join(names)})")


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic (whatever the file's name:
    browsers sometimes unpack a .gz and keep the name)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt or truncated gzip data ({exc})") from None
    return raw
