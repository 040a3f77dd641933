"""dlbench: benchmark deep-learning frameworks on the same models, weights and data."""

__version__ = "0.1.0"
