"""Make src/dlbench/data/genesis.txt, the text dlbench ships for language-model convergence, from Debian.

Run once, by hand, when the file must be remade (it is kept in the repo):

    python scripts/make_genesis.py        # needs apt-get and dpkg; prints the file's sha256

It downloads Debian's ``bible-kjv`` (the ``bible`` reader) and ``bible-kjv-text`` (its compressed King
James Version, whose text is in the public domain: the translation dates from 1611), prints the Book of
Genesis with the reader, and keeps one verse per line without chapter headings or verse numbers. The
sha256 printed must equal ``dlbench.data.genesis.SHA256``, which the loader checks.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "data" / "genesis.txt"


def verses(raw: str) -> list[str]:
    """The reader's output (``Genesis N`` headings, verses numbered and wrapped) as one verse per line."""
    out: list[str] = []
    for line in raw.splitlines():
        line = line.strip()
        if not line or re.fullmatch(r"Genesis \d+", line):
            continue
        m = re.match(r"(\d+) (.*)", line)
        if m:
            out.append(m.group(2))
        elif out:
            out[-1] += " " + line
    return out


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", "bible-kjv", "bible-kjv-text"], cwd=tmp, check=True)
        for deb in Path(tmp).glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(Path(tmp) / "root")], check=True)
        root = Path(tmp) / "root"
        raw = subprocess.run([str(root / "usr/bin/bible"), "-p", str(root / "usr/lib"), "gen1:1-50:26"],
                             capture_output=True, text=True, check=True).stdout
    text = "\n".join(verses(raw)) + "\n"
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT.name}: {len(text.encode())} bytes, {text.count(chr(10))} verses, "
          f"sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
