"""Where a framework's persistent compilation cache lives (``DLBENCH_CACHE_DIR``).

Some caches are configured by environment variables that the framework reads when it is
imported, so these helpers import no framework: a backend module calls them before its import.
"""

from __future__ import annotations

import os

CACHE_ENV = "DLBENCH_CACHE_DIR"


def cache_dir(sub: str) -> str | None:
    """``$DLBENCH_CACHE_DIR/sub``, created, or None when the variable is not set."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        return None
    path = os.path.join(root, sub)
    os.makedirs(path, exist_ok=True)
    return path


def set_tf_xla_cache() -> str | None:
    """Point TensorFlow's persistent XLA cache (``--tf_xla_persistent_cache_directory`` in
    ``TF_XLA_FLAGS``, read when TF starts) at the dlbench cache; before ``import tensorflow``.
    It holds executables compiled by ``tf.function(jit_compile=True)``."""
    path = cache_dir("tf_xla")
    if path is None:
        return None
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory" not in flags:
        os.environ["TF_XLA_FLAGS"] = f"{flags} --tf_xla_persistent_cache_directory={path}".strip()
    return path


def set_torch_inductor_cache() -> str | None:
    """Point Inductor's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``) at the dlbench cache; before ``import torch``."""
    path = cache_dir("torchinductor")
    if path is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    return path
