"""torch's side of the parameter server (dlbench.distributed.ps): its workers build the model with the torch
backend and load each pull into it, in canonical layout, before computing their gradient."""

from __future__ import annotations

import numpy as np
import torch


def load_params(model, params: dict[str, np.ndarray]) -> None:
    """Copy pulled parameters (canonical layout) into the backend's model, in place."""
    with torch.no_grad():
        for name, value in params.items():
            tensor, to_torch, _ = model.bindings[name]
            tensor.copy_(torch.from_numpy(np.ascontiguousarray(to_torch(value))))
