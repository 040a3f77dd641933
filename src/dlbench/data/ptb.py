"""The Penn Treebank language-modelling text (Mikolov's ``simple-examples/data``).

``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt``: one sentence per line, words separated
by spaces, rare words already replaced by ``<unk>``. As in the standard PTB language-model
set-up (Zaremba et al. 2014), every line becomes its words followed by ``<eos>``, and the
whole split is one stream of word ids.

Vocabulary: every word of the TRAINING file plus ``<eos>`` (10,000 in the real data, the
``vocab`` of lstm-ptb; more than 10,000 is an error), numbered 0.. by count descending, ties
alphabetically. A valid/test word not in it becomes ``<unk>`` (never happens with the real
files); without an ``<unk>`` in the vocabulary it is an error.

Batching (:meth:`Dataset.batches`): the stream is cut into ``batch_size`` contiguous rows and
read in windows of ``seq_len`` (32 for lstm-ptb) steps; targets are the inputs shifted by one
word (Zaremba et al.'s ``ptb_iterator``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError
from dlbench.data.files import data_root, find_dir, find_file

EOS, UNK = "<eos>", "<unk>"
MAX_VOCAB = 10000
SUBDIRS = ("ptb", "simple-examples/data", "ptb/simple-examples/data", "")
SPLITS = ("train", "valid", "test")


def read_words(path: Path) -> list[str]:
    """The file's words, ``<eos>`` after each line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    words: list[str] = []
    for line in text.splitlines():
        words += line.split()
        words.append(EOS)
    if all(w == EOS for w in words):
        raise DataError(f"{path}: no words (expected one sentence per line, words separated by spaces)")
    return words


def build_vocab(words: list[str], max_size: int = MAX_VOCAB, path: Path | None = None) -> dict[str, int]:
    """Word -> id by count descending, then alphabetically; more than ``max_size`` words is an error."""
    counts = Counter(words)
    if len(counts) > max_size:
        raise DataError(f"{path or 'ptb training text'}: {len(counts)} distinct words (with <eos>), "
                        f"expected at most {max_size} as in the real PTB (lstm-ptb's vocabulary)")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {word: i for i, (word, _) in enumerate(ranked)}


def load_ptb(data_dir: str | Path | None, split: str = "train", seq_len: int = 32) -> Dataset:
    """PTB ``split`` (train, valid or test) as a stream of int64 word ids; ``seq_len`` steps per
    window (lstm-ptb: 32; :func:`dlbench.data.adapt` sets it from the model).

    The files are looked for in ``DATA_DIR/ptb/``, ``DATA_DIR/simple-examples/data/`` (as the
    archive unpacks), ``DATA_DIR/ptb/simple-examples/data/``, then ``DATA_DIR/``. Loading
    valid/test reads the training file too, for the vocabulary. ``info['words']`` lists the
    vocabulary by id.
    """
    if split not in SPLITS:
        raise DataError(f"ptb has splits {', '.join(SPLITS)}; got {split!r}")
    directory = find_dir(data_root(data_dir, "ptb"), SUBDIRS, "ptb.train.txt", "ptb")
    train_path = find_file(directory, ["ptb.train.txt"], "the PTB training text")
    train_words = read_words(train_path)
    vocab = build_vocab(train_words, MAX_VOCAB, train_path)
    path = train_path if split == "train" else find_file(directory, [f"ptb.{split}.txt"], f"the PTB {split} text")
    words = train_words if split == "train" else read_words(path)
    unk = vocab.get(UNK)
    ids = np.empty(len(words), dtype=np.int64)
    for i, w in enumerate(words):
        wid = vocab.get(w, unk)
        if wid is None:
            raise DataError(f"{path}: word {w!r} is not in the training vocabulary, which has no {UNK} to map it to")
        ids[i] = wid
    return Dataset("ptb", split, "stream", ids, None, len(vocab), vocab=len(vocab), seq_len=seq_len,
                   info={"files": [str(path)], "words": list(vocab)})
