"""A loaded data set split, and the one seeded batch order every framework sees."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dlbench.core.cell import DEFAULT_SEED
from dlbench.data.errors import DataError
from dlbench.data.synthetic import Batch

Kind = Literal["image", "vector", "tokens", "stream"]


@dataclass
class Dataset:
    """One split of a data set, in NumPy.

    ``kind`` says what ``x`` holds:

    - ``image``: float32 (N, C, H, W); ``y`` int64 (N,) class labels.
    - ``vector``: float32 (N, D) (images flattened by :func:`dlbench.data.adapt`); ``y`` as for images.
    - ``tokens``: int64 (N, max_len) word ids, padded with 0 after each sequence's ``lengths[i]``
      valid ids; ``y`` int64 (N,) class labels.
    - ``stream``: int64 (T,) word ids of the whole split in order; no ``y``: the targets are the
      next words, cut into windows of ``seq_len`` by :meth:`batches`.

    ``y`` is None for a stream, and for an input whose model needs no labels (autoencoders).
    ``vocab``: token ids are < ``vocab`` (0 for images). ``info``: loader facts worth recording
    (normalisation constants, the vocabulary, the files read).
    """

    name: str
    split: str
    kind: Kind
    x: np.ndarray
    y: np.ndarray | None
    num_classes: int
    lengths: np.ndarray | None = None
    vocab: int = 0
    seq_len: int = 0
    info: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        """Samples (tokens for a stream)."""
        return int(self.x.shape[0])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.x.shape[1:])

    @property
    def max_batch(self) -> int:
        """The largest batch one pass can use: the samples, or a stream's rows of ``seq_len`` + 1 tokens."""
        return len(self) // (self.seq_len + 1) if self.kind == "stream" else len(self)

    def num_batches(self, batch_size: int, drop_last: bool = True) -> int:
        _check_batch_size(batch_size)
        if self.kind == "stream":
            return _stream_windows(len(self), batch_size, self.seq_len)
        full, rest = divmod(len(self), batch_size)
        return full + (1 if rest and not drop_last else 0)

    def batches(self, batch_size: int, seed: int = DEFAULT_SEED, shuffle: bool = True,
                drop_last: bool = True) -> Iterator[Batch]:
        """One epoch of :class:`Batch` objects, in an order fixed by ``seed`` alone.

        Samples (images, vectors, token sequences): the order is
        ``np.random.default_rng(seed).permutation(len(self))`` (or 0..N-1 without ``shuffle``),
        cut into consecutive batches; ``drop_last`` (the default) drops a final partial batch so
        every batch has the same shape (a new shape would make compiled frameworks re-trace).
        Token sequences are cut to the longest sequence in their batch, with a float32 ``mask``
        (batch, steps) of 1 on valid steps, as :func:`dlbench.data.make_batch` does.

        Streams (PTB): Zaremba et al.'s contiguous batching. The stream is cut into ``batch_size``
        equal rows (the tail that does not fill a row is dropped); window ``i`` is columns
        ``[i*seq_len, (i+1)*seq_len)`` of every row, its targets the same columns shifted by one
        word. Without ``shuffle`` the windows come in stream order (as the paper's stateful
        training reads them); with it, in the order of ``default_rng(seed).permutation`` of the
        windows. Every window is full, so ``drop_last`` does not apply.

        Use a different seed per epoch (``seed + epoch``) for a new order each epoch.
        """
        _check_batch_size(batch_size)
        if self.kind == "stream":
            yield from self._stream_batches(batch_size, seed, shuffle)
            return
        n = len(self)
        if drop_last and n < batch_size:
            raise DataError(f"{self.name} {self.split}: {n} samples, fewer than one batch of {batch_size}")
        order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            idx = order[start:start + batch_size]
            y = None if self.y is None else self.y[idx]
            if self.kind == "tokens" and self.lengths is not None:
                lengths = self.lengths[idx]
                steps = int(lengths.max())
                x = np.ascontiguousarray(self.x[idx, :steps])
                mask = (np.arange(steps)[None, :] < lengths[:, None]).astype(np.float32)
                yield Batch(x, y, mask)
            else:
                yield Batch(self.x[idx], y)

    def _stream_batches(self, batch_size: int, seed: int, shuffle: bool) -> Iterator[Batch]:
        windows = _stream_windows(len(self), batch_size, self.seq_len)
        if windows == 0:
            raise DataError(f"{self.name} {self.split}: {len(self)} words are too few for batch {batch_size} "
                            f"x {self.seq_len} steps (+1 target word per row)")
        row_len = len(self) // batch_size
        rows = self.x[: batch_size * row_len].reshape(batch_size, row_len)
        order = np.random.default_rng(seed).permutation(windows) if shuffle else np.arange(windows)
        t = self.seq_len
        for i in order:
            start = int(i) * t
            x = np.ascontiguousarray(rows[:, start:start + t])
            y = np.ascontiguousarray(rows[:, start + 1:start + t + 1])
            yield Batch(x, y)


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")


def _stream_windows(tokens: int, batch_size: int, seq_len: int) -> int:
    """Full windows of a stream: each row has ``tokens // batch_size`` words, and a window needs
    ``seq_len`` inputs plus one more word for the last target."""
    if seq_len < 1:
        raise DataError(f"sequence length must be >= 1, got {seq_len}")
    return max(0, (tokens // batch_size - 1) // seq_len)
