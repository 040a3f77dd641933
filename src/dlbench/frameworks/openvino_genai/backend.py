"""OpenVINO GenAI as a backend: the IR ``LLMPipeline`` runs (:mod:`.convert`) before it was made stateful, compiled
by OpenVINO's Core with the pipeline's settings, the whole sequence in one call after an empty cache: its logits, so the
equivalence gate (and quality for the weight-compressed int8 and int4) checks the IR the pipeline times.
``LLMPipeline`` itself gives no logits. Forward only (an inference runtime)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, InferenceOnly, UnsupportedError
from dlbench.frameworks.openvino_genai import DECLARATION, convert
from dlbench.frameworks.openvino_genai.runtime import Compiled, compile_ir, empty_past, run
from dlbench.frameworks.transformers.converted import Tamper
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

NOT_TRAINABLE = "openvino-genai is an inference runtime (its pipeline runs the IR forward only)"


class Backend_(InferenceOnly, Backend):
    not_trainable = NOT_TRAINABLE
    declaration = DECLARATION
    packages = ("openvino_genai", "openvino", "openvino_tokenizers", "nncf", "transformers")
    forward_only_reason = NOT_TRAINABLE + ": gradient and loss checks do not apply"
    #: a change to the Hugging Face folder before conversion (tests plant defects with one)
    tamper: Tamper | None = None

    def __init__(self) -> None:
        self.threads: int | None = None
        self.precision = DEFAULT_PRECISION
        self.loaded: list[dict[str, Any]] = []

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        return {"inference_num_threads": n}

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"openvino-genai runs {', '.join(self.precisions)} here, not {precision}")
        self.precision = precision

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> Compiled:
        if device != "cpu":
            raise UnsupportedError("openvino-genai runs on the CPU only in dlbench")
        compiled = compile_ir(convert.converted(spec, weights, self.precision, self.tamper), self.threads)
        self.loaded.append({"model": spec.name, **compiled.info()})
        return compiled

    def build_info(self, model: Compiled) -> dict[str, Any]:
        return model.info()

    def precision_info(self, model: Compiled) -> dict[str, str]:
        return {"param_dtype": model.param_dtype(), "compute_dtype": model.compute_dtype()}

    def place(self, batch: Batch, model: Compiled) -> np.ndarray:
        if batch.mask is not None and not batch.mask.all():
            raise UnsupportedError("openvino-genai is given unpadded token sequences only here")
        return np.ascontiguousarray(batch.x, np.int64)

    def forward(self, model: Compiled, batch: np.ndarray) -> Callable[[], np.ndarray]:
        request, past = model.compiled.create_infer_request(), empty_past(model, len(batch))

        def call() -> np.ndarray:
            return run(request, batch, past)[0]
        return call

    def sync(self, out: Any) -> None:
        pass

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out)

    def param_count(self, model: Compiled) -> int:
        """The IR's weight constants' elements (a compressed weight counts its elements; scalars are not counted)."""
        return int(sum(model.weights.values()))

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        rotary = {layer.rope_theta: spec.param_shapes()[f"{layer.name}.wq"][1] // layer.heads // 2
                  for layer in L.walk(spec.layers) if isinstance(layer, L.Attention) and layer.rope_theta}
        return sum(rotary.values()), "the traced graph keeps the rotary embedding's inverse frequencies as a constant"

    def get_params(self, model: Any) -> dict[str, np.ndarray]:
        raise UnsupportedError("openvino-genai's IR holds OpenVINO's layout; no canonical read-back")

    def info(self) -> dict[str, Any]:
        import openvino_genai

        return {"openvino_genai": openvino_genai.__version__, "models": self.loaded}
