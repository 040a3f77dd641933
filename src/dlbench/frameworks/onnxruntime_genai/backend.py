"""ONNX Runtime GenAI as a backend: the model builder's graph (:mod:`.convert`) run by the runtime's own
``Generator``, whose ``get_output("logits")`` gives every position's logits after ``append_tokens`` of the
whole sequence, so the equivalence gate checks the same graph the decoder times. Forward only (an
inference runtime); fp32 and int4 (the builder's weight-only MatMulNBits).

Fast-path settings: the session's intra-op threads are the process's (``genai_config.json`` overlay), one
inter-op thread; the builder's CPU graph as it writes it (GroupQueryAttention, fused rotary embedding).
A forward call makes a ``Generator`` (its key/value buffers sized for the batch) and appends the batch: the
runtime has no stateless forward.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, InferenceOnly, UnsupportedError
from dlbench.frameworks.onnxruntime_genai import DECLARATION, convert
from dlbench.frameworks.onnxruntime_genai.runtime import Loaded, generator, load, tokens_in
from dlbench.frameworks.transformers.converted import Tamper
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

NOT_TRAINABLE = "onnxruntime-genai is an inference runtime (its Generator runs the builder's graph forward only)"


class Backend_(InferenceOnly, Backend):
    not_trainable = NOT_TRAINABLE
    declaration = DECLARATION
    packages = ("onnxruntime_genai", "onnxruntime", "onnx", "transformers")
    gate_form = MappingProxyType(convert.GATE_FORM)
    forward_only_reason = NOT_TRAINABLE + ": gradient and loss checks do not apply"
    #: a change to the Hugging Face folder before the builder runs (tests plant defects with one)
    tamper: Tamper | None = None

    def __init__(self) -> None:
        self.threads: int | None = None
        self.precision = DEFAULT_PRECISION
        self.loaded: list[dict[str, Any]] = []

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        return {"intra_op": n, "inter_op": 1}

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"onnxruntime-genai builds {', '.join(self.precisions)} here, not {precision}")
        self.precision = precision

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> Loaded:
        if device != "cpu":
            raise UnsupportedError("onnxruntime-genai runs on the CPU only in dlbench")
        convert.check_shapes(spec)
        loaded = load(convert.converted(spec, weights, self.precision, self.tamper), self.threads)
        self.loaded.append({"model": spec.name, **loaded.info()})
        return loaded

    def build_info(self, model: Loaded) -> dict[str, Any]:
        return model.info()

    def precision_info(self, model: Loaded) -> dict[str, str]:
        """The weights' type and the products' as the builder's graph holds them (MatMulNBits bits and accuracy level)."""
        return {"param_dtype": model.facts["param_dtype"], "compute_dtype": model.facts["compute_dtype"]}

    def place(self, batch: Batch, model: Loaded) -> np.ndarray:
        if batch.mask is not None and not batch.mask.all():
            raise UnsupportedError("onnxruntime-genai's Generator takes unpadded token sequences only")
        return tokens_in(batch.x)

    def forward(self, model: Loaded, batch: np.ndarray) -> Callable[[], np.ndarray]:
        n, t = batch.shape

        def run() -> np.ndarray:
            gen = generator(model.model, n, t)
            gen.append_tokens(batch)
            return np.asarray(gen.get_output("logits"))
        return run

    def sync(self, out: Any) -> None:
        pass  # the runtime returns host arrays

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out)

    def param_count(self, model: Loaded) -> int:
        """The builder's graph's parameters (a 4-bit weight counts as its N x K; the rotary tables are not)."""
        return int(model.facts["params"])

    def get_params(self, model: Any) -> dict[str, np.ndarray]:
        raise UnsupportedError("onnxruntime-genai's graph holds the builder's layout; no canonical read-back")

    def info(self) -> dict[str, Any]:
        import onnxruntime
        import onnxruntime_genai as og

        return {"onnxruntime_genai": og.__version__, "onnxruntime": onnxruntime.__version__,
                "builder": "onnxruntime_genai.models.builder (CPU execution provider)", "models": self.loaded}
