"""Shared fixtures: frameworks are parametrized over what is installed, skipping the rest with why."""

from __future__ import annotations

import importlib.util
import os

import pytest


def requires(module: str) -> pytest.MarkDecorator:
    """Skip a test whose framework is not installed (CI installs them all)."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


#: tests over CI's time budget (XLA and Keras-on-JAX/TF compiles on a 2-core machine): run with DLBENCH_SLOW_TESTS=1
over_budget = pytest.mark.skipif(not os.environ.get("DLBENCH_SLOW_TESTS"),
                                 reason="over CI's time budget; set DLBENCH_SLOW_TESTS=1 to run")


@pytest.fixture
def tmp_db(tmp_path):
    return tmp_path / "results.db"
