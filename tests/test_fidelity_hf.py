"""Fidelity: dlbench's transformers, their weights loaded into Hugging Face ``transformers``' own classes
(GPT-2, BERT, ViT, Llama), give the same logits as dlbench's float64 reference and torch model, within
the gate's forward tolerance, on the small forms. The installed versions are in the skip/assert texts."""

import numpy as np
import pytest

from dlbench.data.synthetic import make_batch
from dlbench.gate import reference
from dlbench.gate.verify import FORWARD_TOL, VERIFY_BATCH, _rel
from dlbench.models import verify_spec
from dlbench.models.weights import init_weights
from tests.conftest import requires

pytestmark = [requires("torch"), requires("transformers")]

MODELS = ["bert-base", "gpt2", "vit-b16", "smollm2-135m"]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("model", MODELS)
def test_hugging_face_logits_match_the_reference(model, attn):
    import transformers

    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.hf_transformers import hf_logits, hf_model

    spec = verify_spec(model)
    weights = init_weights(spec, 0, mode="verify")
    batch = make_batch(spec, VERIFY_BATCH, 0)
    hf = hf_logits(hf_model(spec, weights, attn), spec, batch)
    ref, _ = reference.forward(spec, weights, batch)
    backend = TorchBackend()
    built = backend.build(spec, weights)
    ours = backend.to_numpy(backend.forward(built, backend.place(batch, built))())
    where = f"transformers {transformers.__version__}, {attn}"
    if batch.mask is not None and ref.ndim == 3:  # padded positions of a per-position output are not defined
        keep = batch.mask[..., None] > 0
        hf, ref, ours = (np.where(keep, a, 0.0) for a in (hf, ref, ours))
    assert _rel(hf, ref) <= FORWARD_TOL, where
    assert _rel(hf, ours) <= FORWARD_TOL, where


def test_an_unset_parameter_is_an_error():
    from dlbench.gate.hf_transformers import hf_state

    spec = verify_spec("gpt2")
    state = hf_state(spec, init_weights(spec))
    assert "transformer.h.1.attn.c_attn.weight" in state and "lm_head.weight" not in state  # tied: once
    with pytest.raises(ValueError, match="no Hugging Face"):
        hf_state(verify_spec("lenet"), init_weights(verify_spec("lenet")))
