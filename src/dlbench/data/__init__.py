"""Data for measurements: seeded synthetic batches, and loaders for the real data sets' own file
formats, read from a directory the user gives (nothing is ever downloaded). See docs/data.md."""

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError
from dlbench.data.registry import DATASETS, adapt, input_forms, list_datasets, load_dataset, models_for
from dlbench.data.synthetic import Batch, make_batch

__all__ = ["Batch", "make_batch", "Dataset", "DataError", "DATASETS", "load_dataset", "list_datasets",
           "adapt", "input_forms", "models_for"]
