"""The IMDB movie-review sentiment data set (Maas et al. 2011) from its ``aclImdb`` text tree.

``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``: one review per UTF-8 file, 12,500 of
each label per split in the real data. (The archive's ``train/unsup`` reviews, ``*.feat`` and
``*.vocab`` files are not used: the vocabulary is rebuilt from the text, as described here.)

Tokenisation (:func:`tokenize`): lowercase; every ``<br />`` (the reviews' HTML line breaks,
also written ``<br/>`` / ``<br>``) becomes a space; words are the runs of letters, digits and
apostrophes (letters and digits in the Unicode sense of ``\\w``, without ``_``), with apostrophes
stripped from both ends of a run (so ``'quoted'`` is ``quoted`` but ``don't`` stays), and runs
left empty dropped.

Vocabulary (:func:`build_vocab`), from the TRAINING reviews only, for both splits: words are
counted over all training reviews and sorted by count descending, ties alphabetically (so it is
deterministic). There are ``vocab_size`` ids in all (10,000 by default, the ``vocab`` of the
lstm-imdb model, so every id is < 10,000): id 0 is padding, id 1 stands for any word outside
the vocabulary, and ids 2 .. vocab_size-1 are the ``vocab_size - 2`` (9,998) most frequent words.

Each review keeps its first ``max_len`` (100) tokens. Labels: pos = 1, neg = 0.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError
from dlbench.data.files import data_root, find_dir

PAD, OOV = 0, 1
SUBDIRS = ("aclImdb", "imdb/aclImdb", "imdb", "")
LABELS = (("neg", 0), ("pos", 1))
_BREAK = re.compile(r"<br\s*/?>")
_WORD = re.compile(r"\w+(?:'+\w+)*")  # on text without "_": a run with its end apostrophes left out


def tokenize(text: str) -> list[str]:
    """A review's words, as the module docstring defines them."""
    return _WORD.findall(_BREAK.sub(" ", text.lower()).replace("_", " "))


def build_vocab(reviews: Iterable[list[str]], vocab_size: int = 10000) -> dict[str, int]:
    """Word -> id for the ``vocab_size - 2`` most frequent words (count descending, then
    alphabetical), numbered from 2; 0 and 1 are padding and out-of-vocabulary."""
    if vocab_size < 3:
        raise DataError(f"imdb vocabulary size must be >= 3 (padding, out-of-vocabulary, one word), got {vocab_size}")
    counts: Counter[str] = Counter()
    for words in reviews:
        counts.update(words)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 2]
    return {word: i for i, (word, _) in enumerate(ranked, start=2)}


def review_files(split_dir: Path) -> list[tuple[Path, int]]:
    """Every review file of a split with its label: neg then pos, each sorted by file name."""
    out: list[tuple[Path, int]] = []
    for folder, label in LABELS:
        d = split_dir / folder
        if not d.is_dir():
            raise DataError(f"{d}: no such directory (expected the {folder} reviews as *.txt files)")
        files = sorted(d.glob("*.txt"))
        if not files:
            raise DataError(f"{d}: no *.txt review files")
        out += [(f, label) for f in files]
    return out


def read_reviews(split_dir: Path) -> tuple[list[list[str]], np.ndarray]:
    """Tokenised reviews and int64 labels of one split directory (``aclImdb/train`` or ``test``)."""
    texts, labels = [], []
    for path, label in review_files(split_dir):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
        words = tokenize(text)
        if not words:
            raise DataError(f"{path}: no words in the review (expected a non-empty review text)")
        texts.append(words)
        labels.append(label)
    return texts, np.asarray(labels, dtype=np.int64)


def encode(reviews: list[list[str]], vocab: dict[str, int], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, max_len) int64 ids padded with 0, and the (N,) int64 lengths (at most ``max_len``)."""
    ids = np.zeros((len(reviews), max_len), dtype=np.int64)
    lengths = np.zeros(len(reviews), dtype=np.int64)
    for i, words in enumerate(reviews):
        row = [vocab.get(w, OOV) for w in words[:max_len]]
        ids[i, : len(row)] = row
        lengths[i] = len(row)
    return ids, lengths


def load_imdb(data_dir: str | Path | None, split: str = "train", vocab_size: int = 10000, max_len: int = 100) -> Dataset:
    """IMDB ``split`` as padded token ids with lengths and int64 labels (pos = 1, neg = 0).

    The tree is looked for in ``DATA_DIR/aclImdb/`` (as the archive unpacks),
    ``DATA_DIR/imdb/aclImdb/``, ``DATA_DIR/imdb/``, then ``DATA_DIR/``. The test split reads the
    training reviews too, for the vocabulary. ``info['words']`` lists the vocabulary by id from 2.
    """
    if split not in ("train", "test"):
        raise DataError(f"imdb has splits train, test; got {split!r}")
    if max_len < 1:
        raise DataError(f"imdb max_len must be >= 1, got {max_len}")
    root = find_dir(data_root(data_dir, "imdb"), SUBDIRS, "train", "imdb")
    train_texts, train_labels = read_reviews(root / "train")
    vocab = build_vocab(train_texts, vocab_size)
    if split == "train":
        texts, labels = train_texts, train_labels
    else:
        if not (root / "test").is_dir():
            raise DataError(f"{root / 'test'}: no such directory (expected test/pos and test/neg review files)")
        texts, labels = read_reviews(root / "test")
    ids, lengths = encode(texts, vocab, max_len)
    return Dataset("imdb", split, "tokens", ids, labels, 2, lengths=lengths, vocab=vocab_size,
                   info={"root": str(root), "words": list(vocab), "max_len": max_len})
