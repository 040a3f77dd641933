"""What every ``dlbench`` command module shares: the console, the parser that turns bad usage into
one line and exit 2, and the parsers of comma-separated flag values."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from dlbench.errors import UsageError

console = Console(width=None if sys.stdout.isatty() else 200)


class Parser(argparse.ArgumentParser):
    """argparse that reports bad usage on one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def split_list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def int_list(text: str | None, what: str) -> list[int]:
    out = []
    for item in split_list(text):
        try:
            value = int(item)
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
