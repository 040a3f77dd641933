"""Shared fixtures: frameworks are parametrized over what is installed, skipping the rest with why."""

from __future__ import annotations

import importlib.util

import pytest


def requires(module: str) -> pytest.MarkDecorator:
    """Skip a test whose framework is not installed (CI installs them all)."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


@pytest.fixture
def tmp_db(tmp_path):
    return tmp_path / "results.db"
