"""What every ``dlbench`` command module shares: the console, the parser that turns bad usage into
one line and exit 2, and the parsers of comma-separated flag values."""

from __future__ import annotations

import argparse
import re
import sys

from rich.console import Console
from rich.text import Text

from dlbench.core.errors import UsageError
from dlbench.core.outputs import write_file

console = Console(width=None if sys.stdout.isatty() else 200)


def ascii_int(text: str) -> int:
    """An integer flag: ASCII digits only (Python's ``int`` also reads ``'١٢'`` as 12)."""
    if not text.isascii():
        raise ValueError(text)
    return int(text)


def ascii_float(text: str) -> float:
    """A number flag: ASCII only; ``inf`` and ``nan`` parse here and are refused by the setting's own
    bounds (dlbench.planning.suite), with the suite key named."""
    if not text.isascii():
        raise ValueError(text)
    return float(text)


class Parser(argparse.ArgumentParser):
    """argparse that reports bad usage on one line and exits 2; ``type=int`` and ``type=float`` read
    ASCII numbers only."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", int, ascii_int)
        self.register("type", float, ascii_float)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def split_list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def int_list(text: str | None, what: str) -> list[int]:
    out = []
    for item in split_list(text):
        try:
            value = ascii_int(item)
        except ValueError:
            raise UsageError(f"{what} must be integers, got {item!r}") from None
        if value <= 0:
            raise UsageError(f"{what} must be > 0, got {value}")
        out.append(value)
    return out


def thread_list(text: str | None) -> list[int | str]:
    """``--threads``: positive integers, or ``all`` / ``half`` of this machine's cores (as in a suite file)."""
    out: list[int | str] = []
    for item in split_list(text):
        if item in ("all", "half"):
            out.append(item)
        else:
            out += int_list(item, "thread counts (or 'all', 'half')")
    return out


def names(text: str | None, flag: str) -> list[str] | None:
    """A comma-separated flag: None when it is not given (the default applies); one naming nothing
    (``--model ,``, ``--model ""``) is refused rather than read as the default."""
    if text is None:
        return None
    out = split_list(text)
    if not out:
        raise UsageError(f"{flag} names nothing (got {text!r}); leave it out for the default")
    return out


def counts(text: str | None, flag: str) -> list[int | str] | None:
    """``--batch``, ``--threads``: integers where they parse as such, words (``all``, ``half``,
    ``default``) as given; :mod:`dlbench.planning.resolve` checks them by the suite file's rule."""
    items = names(text, flag)
    return None if items is None else [int(i) if re.fullmatch(r"[+-]?[0-9]+", i) else i for i in items]


def texts(*values: object) -> list[Text]:
    """Table cells from data: printed as they are, never read as markup."""
    return [v if isinstance(v, Text) else Text(str(v)) for v in values]


def write_output(path: str, text: str, db: str | None = None) -> None:
    """Write a command's output file through :func:`dlbench.core.outputs.write_file`: never over the
    database or through a symbolic link, whole or not at all; a missing directory or a path that is a
    directory is bad input."""
    write_file(path, text, db)


def note_damage(notes: list[str]) -> None:
    """Say on stderr what reading the database set aside as damaged (dlbench.storage.damage), one line each."""
    for note in notes:
        print(f"dlbench: warning: damaged row: {note} (dlbench check --db DB lists every one)", file=sys.stderr)
