"""dlbench's gpt2 and smollm2-135m loaded into keras-hub's own GPT-2 and Llama models (the Keras
implementation people run) give the float64 reference's logits within the gate's float32 tolerance."""

import dataclasses

import numpy as np
import pytest

from dlbench.data.synthetic import make_batch
from dlbench.gate.reference import forward
from dlbench.gate.verify import TOLERANCES
from dlbench.models import get_model
from dlbench.models.weights import init_weights
from tests.conftest import requires

pytestmark = [requires("keras_hub")]


@pytest.mark.parametrize("model", ["gpt2", "smollm2-135m"])
def test_keras_hub_computes_dlbenchs_function(model):
    import keras
    import keras_hub

    from dlbench.gate.keras_hub_models import keras_hub_causal_lm, keras_hub_logits

    spec = get_model(model, small=True)
    weights = init_weights(spec, 0, mode="verify")
    batch = make_batch(spec, 3, 0)
    got = keras_hub_logits(keras_hub_causal_lm(spec, weights), batch.x)
    ref = forward(spec, weights, batch)[0]
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < TOLERANCES["fp32"].forward, (err, keras.__version__, keras_hub.__version__, keras.backend.backend())


def test_every_keras_hub_variable_comes_from_one_canonical_array():
    """A canonical array missing (or one keras-hub has no variable for) is an error, not a variable left
    at keras-hub's own initial value."""
    from dlbench.gate.keras_hub_models import family, keras_hub_backbone

    spec = get_model("gpt2", small=True)
    weights = init_weights(spec, 0, mode="verify")
    short = dataclasses.replace(weights, params={k: v for k, v in weights.params.items() if k != "h0.ln2.bias"})
    with pytest.raises(ValueError, match="without a canonical array"):
        keras_hub_backbone(spec, short)
    with pytest.raises(ValueError, match="no keras-hub counterpart"):
        family(get_model("bert-base", small=True))
