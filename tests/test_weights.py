import numpy as np

from dlbench.models import get_model
from dlbench.models.weights import directions, init_weights


def test_same_seed_same_numbers():
    a = init_weights(get_model("lenet"), 3)
    b = init_weights(get_model("lenet"), 3)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


def test_different_seed_different_numbers():
    a = init_weights(get_model("lenet"), 0)
    b = init_weights(get_model("lenet"), 1)
    assert not np.array_equal(a.params["conv1.weight"], b.params["conv1.weight"])


def test_shared_parameters_identical_across_sae_phases():
    a = init_weights(get_model("sae:phase=pretrain2"), 0)
    b = init_weights(get_model("sae"), 0)
    assert np.array_equal(a.params["enc1.weight"], b.params["enc1.weight"])


def test_train_mode_init_values():
    spec = get_model("resnet-56")
    w = init_weights(spec, 0)
    assert set(w.params) == set(spec.param_shapes())
    assert all(v.dtype == np.float32 for v in w.params.values())
    assert np.all(w.params["stem.bn.gamma"] == 1) and np.all(w.params["stem.bn.beta"] == 0)
    assert np.all(w.state["stem.bn.running_var"] == 1)
    # He normal: std sqrt(2 / fan_in)
    conv = w.params["s3b0.a.conv.weight"]
    assert abs(conv.std() - np.sqrt(2 / (32 * 9))) < 0.01


def test_lstm_forget_bias_is_one():
    spec = get_model("lstm-imdb")
    b = init_weights(spec, 0).params["lstm.b"]
    assert np.all(b[128:256] == 1) and np.all(b[:128] == 0)


def test_verify_mode_randomises_biases_and_bn_state():
    w = init_weights(get_model("resnet-56"), 0, mode="verify")
    assert np.abs(w.params["fc.bias"]).sum() > 0
    assert not np.all(w.state["stem.bn.running_mean"] == 0)


def test_directions_are_unit_and_cover_trainable_only():
    spec = get_model("sae:phase=pretrain2")
    (v,) = directions(spec, 1)  # a generator: drawn as taken
    assert set(v) == set(spec.trainable_names())
    assert abs(sum(float((a * a).sum()) for a in v.values()) - 1.0) < 1e-9
