"""dlbench's transformers as Hugging Face ``transformers`` builds them, by the names the fidelity checks, the
export (``dlbench export-model``) and the benchmarks use. They live in the transformers framework's folder
(:mod:`dlbench.frameworks.transformers.hf_model`), which loads the same classes and, below the gate, may
not import it."""

from dlbench.frameworks.transformers.hf_model import (
    CLASSES,
    FAMILIES,
    config,
    family,
    hf_inputs,
    hf_logits,
    hf_model,
    hf_state,
    save_folder,
)

__all__ = ["CLASSES", "FAMILIES", "config", "family", "hf_inputs", "hf_logits", "hf_model", "hf_state", "save_folder"]
