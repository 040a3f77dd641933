"""The Book of Genesis (King James Version), bytes as tokens: the text dlbench ships for language models.

No data set can be downloaded where dlbench runs its own checks, and a language model's convergence
is best judged on real text. ``genesis.txt`` (197 KB, one verse per line; public domain, see
``genesis.LICENSE.txt``) is made by ``scripts/make_genesis.py`` and checked against :data:`SHA256` at
every load. The vocabulary is byte-level: a token is one byte of the UTF-8 text (256 ids; the text is
ASCII, so 0..127 occur), so any model with a vocabulary of at least 256 reads it, with no tokenizer to
agree on between frameworks.

Splits, by verse (the text's own order, so no verse is in two splits): the first 90% ``train``, the
next 5% ``valid``, the last 5% ``test``. Each is one stream, cut into windows of ``seq_len`` bytes by
:meth:`Dataset.batches` with next-byte targets, as PTB is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError

TEXT = Path(__file__).with_name("genesis.txt")
#: sha256 of ``genesis.txt`` as ``scripts/make_genesis.py`` writes it
SHA256 = "e7b72bfd25d395f55a3bd0c1ada5cbf3fd627f61734d239503d834ac9b5e23b6"
VOCAB = 256
SPLITS = {"train": (0.0, 0.9), "valid": (0.9, 0.95), "test": (0.95, 1.0)}


def load_genesis(data_dir: str | Path | None = None, split: str = "train", seq_len: int = 64) -> Dataset:
    """``split`` of the bundled text as a stream of byte ids (``data_dir`` is not read: the text is bundled)."""
    if split not in SPLITS:
        raise DataError(f"genesis has splits {', '.join(SPLITS)}; got {split!r}")
    data = TEXT.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise DataError(f"genesis: the bundled {TEXT.name} has sha256 {digest}, expected {SHA256} "
                        "(remake it with scripts/make_genesis.py)")
    lines = data.splitlines(keepends=True)
    lo, hi = (round(f * len(lines)) for f in SPLITS[split])
    ids = np.frombuffer(b"".join(lines[lo:hi]), dtype=np.uint8).astype(np.int64)
    return Dataset("genesis", split, "stream", ids, None, VOCAB, vocab=VOCAB, seq_len=seq_len,
                   info={"files": [TEXT.name], "verses": [lo, hi], "sha256": SHA256, "tokens": "bytes"})
