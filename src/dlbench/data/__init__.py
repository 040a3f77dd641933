"""Data for measurements: synthetic batches now; loaders for real formats live beside them."""

from dlbench.data.synthetic import Batch, make_batch

__all__ = ["Batch", "make_batch"]
