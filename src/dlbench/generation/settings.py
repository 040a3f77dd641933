"""Settings of the generate scenarios, as a suite holds them (``generation:``) and ``dlbench run``'s
flags set them. Checked where a suite is made: a zero or negative length is a one-line usage error;
a prompt and new tokens beyond a model's context are refused by the scenario's
:meth:`~dlbench.scenarios.generate.Generate.check`, which knows the models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

#: flag of each setting, for the messages
FLAGS = {"prompt": "--prompt-len", "new_tokens": "--new-tokens", "runs": "--generations",
         "ttft_ms": "--ttft-ms", "tpot_ms": "--tpot-ms"}


class GenerationModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: prompt tokens per sequence (prefill); defaults sized for a 2-core CPU
    prompt: int = 128
    #: tokens generated per sequence (the first from the prefill, the rest one decode step each)
    new_tokens: int = 64
    #: timed generations per measuring process (after one untimed generation that warms up)
    runs: int = 5
    #: generate-server: bounds on LoadGen's time to first token and time per output token, ms (their
    #: 99th percentiles; None: LoadGen's defaults, 100 ms each)
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @field_validator("prompt", "new_tokens", "runs")
    @classmethod
    def _positive(cls, v: int, info) -> int:
        if v < 1:
            raise ValueError(f"{info.field_name} ({FLAGS[info.field_name]}) must be at least 1, got {v}")
        return v

    @field_validator("ttft_ms", "tpot_ms")
    @classmethod
    def _bound(cls, v: float | None, info) -> float | None:
        if v is not None and not v > 0:
            raise ValueError(f"{info.field_name} ({FLAGS[info.field_name]}) must be positive, got {v}")
        return v
