#!/usr/bin/env python3
"""pip's configuration as ``uv pip install`` options, one per line, so that uv installs what pip would.

scripts/install.sh installs the main environment with uv (about 10 s where pip takes about 90 on the
2-core machine: docs/ci.md) only when this script can say every setting pip would read in uv's words.
uv reads no pip.conf and no ``PIP_*`` variable: without this, a machine whose pip finds a CPU build of
torch in a local folder (``find-links``) would get PyPI's multi-GB CUDA build from uv. A setting that
could change what is installed and has no translation here (a proxy, a client certificate) makes this
script name it on stderr and exit 1, and install.sh uses pip.

Usage: ``PYTHON uv_args.py`` where PYTHON is the interpreter whose pip would install (its
``pip config list`` is read: every configuration file pip reads, and the ``PIP_*`` variables).
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import ast
import subprocess
import sys

#: pip setting -> uv option; a setting's value is a whitespace-separated list, one option per item
LISTS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "only-binary": "--only-binary", "no-binary": "--no-binary",
         "trusted-host": "--allow-insecure-host"}
#: pip switches -> uv option (given when the setting is true)
SWITCHES = {"no-index": "--no-index", "pre": "--prerelease=allow"}
#: settings that change how pip talks or prints, not what it installs (uv has its own, or needs none:
#: ``cert`` is a CA bundle, and uv falls back to pip when its own trust store refuses the index)
HARMLESS = {"cert", "timeout", "default-timeout", "disable-pip-version-check", "progress-bar", "quiet", "verbose",
            "no-input", "cache-dir", "no-cache-dir", "retries", "root-user-action", "no-color", "log",
            "require-virtualenv", "no-warn-script-location", "upgrade-strategy", "config-file"}
#: pip's short names of the settings above, as a ``PIP_`` variable may spell them
ALIASES = {"i": "index-url", "f": "find-links", "c": "constraint"}
#: sections pip reads for ``pip install``, lowest precedence first (``:env:`` is the PIP_* variables)
SECTIONS = ("global", "install", ":env:")


class Untranslatable(Exception):
    """A pip setting that may change what is installed and has no uv equivalent here."""


def settings(listing: str) -> dict[str, str]:
    """``pip config list``'s lines (``section.key='value'``) as the values ``pip install`` uses."""
    found: dict[tuple[str, str], str] = {}
    for line in listing.splitlines():
        name, sep, quoted = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or section not in SECTIONS:
            continue
        try:
            value = ast.literal_eval(quoted)
        except (ValueError, SyntaxError):
            value = quoted
        found[(section, ALIASES.get(key, key))] = str(value)
    out: dict[str, str] = {}
    for section in SECTIONS:
        out.update({key: value for (sect, key), value in found.items() if sect == section})
    return out


def uv_options(values: dict[str, str]) -> list[str]:
    """The uv options for pip's settings ``values``; pip's choice of the best version over every index
    is uv's ``unsafe-best-match`` (uv's default takes the first index that has the package)."""
    options = ["--index-strategy=unsafe-best-match"]
    for key, value in sorted(values.items()):
        if key in LISTS:
            options += [f"{LISTS[key]}={item}" for item in value.split()]
        elif key in SWITCHES:
            if value.strip().lower() in ("1", "true", "yes", "on"):
                options.append(SWITCHES[key])
        elif key not in HARMLESS:
            raise Untranslatable(f"pip's setting {key!r} has no uv equivalent here")
    return options


def main() -> int:
    try:
        listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout
        print("\n".join(uv_options(settings(listing))))
    except Untranslatable as e:
        print(f"uv_args: {e}; installing with pip", file=sys.stderr)
        return 1
    except (OSError, subprocess.SubprocessError) as e:
        print(f"uv_args: pip's configuration could not be read ({e}); installing with pip", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
