import math

import pytest

from dlbench.models import UnknownModelError, get_model, list_models, parse_model_ref, verify_spec
from dlbench.models.layers import Attention, Pool2d, SkipBlock, _pool_out, walk

# Parameter counts by hand from the layer lists in the issue (and the papers' public code).
EXPECTED_PARAMS = {
    "lenet": 520 + 25_050 + 400_500 + 5_010,
    "alexnet": 60_965_224,  # Caffe's bvlc_alexnet
    "alexnet-s": 62_378_344,
    "sae": 784 * 400 + 400 + 400 * 200 + 200 + 200 * 100 + 100 + 100 * 10 + 10,
    "sae-large": 784 * 800 + 800 + 800 * 1000 + 1000 + 1000 * 2000 + 2000 + 2000 * 10 + 10,
    "lstm-imdb": 10_000 * 128 + (128 + 128) * 512 + 512 + 128 * 2 + 2,
    "fcn-s": 26752 * 2048 + 2048 + 3 * (2048 * 2048 + 2048) + 2048 * 26752 + 26752,
    "fcn-r": 784 * 2048 + 2048 + 2048 * 4096 + 4096 + 4096 * 1024 + 1024 + 1024 * 10 + 10,
    "alexnet-r": (32 * 75 + 32) + (32 * 800 + 32) + (64 * 800 + 64) + 1024 * 10 + 10,
    "resnet-56": 853_018,
    "resnet-50": 25_557_032,  # torchvision's resnet50 has the same count
    "resnet-50-cifar": 23_520_842,
    "lstm-ptb": 10_000 * 256 + 2 * ((256 + 256) * 1024 + 1024) + 256 * 10_000 + 10_000,
    # transformers, the published totals: BertModel 109,482,240 + a 2-class head; GPT-2 124M with its head
    # tied; ViT-B/16 with the 1000-class head (ViTForImageClassification); SmolLM2-135M, tied embeddings
    "bert-base": 109_482_240 + 768 * 2 + 2,
    "gpt2": 124_439_808,
    "vit-b16": 86_567_656,
    "smollm2-135m": 134_515_008,
    # dlbench probe's one-operation models
    "gemm": 2048 * 4096,
    "conv": 64 * 64 * 9,
    "dense-1": 1 + 1,
}


def test_registry_has_every_paper_model_and_the_probes():
    assert set(EXPECTED_PARAMS) == set(list_models())


@pytest.mark.parametrize("name", list(EXPECTED_PARAMS))
def test_param_counts_match_layer_lists(name):
    assert get_model(name).param_count == EXPECTED_PARAMS[name]


TRANSFORMERS = ["bert-base", "gpt2", "vit-b16", "smollm2-135m"]


@pytest.mark.parametrize("name", list(EXPECTED_PARAMS))
def test_small_spec_keeps_layers(name):
    full, small = get_model(name), verify_spec(name)
    if name in TRANSFORMERS:  # fewer blocks, each with the full model's layers and options
        def kinds(spec):
            return [(type(x), getattr(x, "causal", None), getattr(x, "approximate", None), getattr(x, "bias", None),
                     bool(getattr(x, "rope_theta", 0))) for x in walk(spec.layers)]
        assert set(kinds(full)) == set(kinds(small))
        assert [type(x) for x in full.layers if not isinstance(x, SkipBlock)] == \
            [type(x) for x in small.layers if not isinstance(x, SkipBlock)]
    else:
        assert [type(layer) for layer in full.layers] == [type(layer) for layer in small.layers]


def test_transformer_shapes_as_published():
    smol = [x for x in walk(get_model("smollm2-135m").layers) if isinstance(x, Attention)]
    assert len(smol) == 30 and smol[0].dims(576) == (9, 3, 64) and smol[0].rope_theta == 100000.0
    assert smol[0].causal and not smol[0].bias
    assert get_model("gpt2").input.shape == (256,) and get_model("bert-base").input.shape == (128,)
    assert get_model("bert-base:seq_len=384").input.shape == (384,)
    assert get_model("vit-b16").layers[1].max_len == 197  # 14 x 14 patches and the class token
    with pytest.raises(UnknownModelError):  # GPT-2 has 1024 positions
        get_model("gpt2:seq_len=2048")


def test_transformer_flops_near_published():
    # ViT-B/16 at 224: 17.6 G multiply-adds (Dosovitskiy et al., Table 6 counts 17.6 "GFLOPs" as MACs)
    assert math.isclose(get_model("vit-b16").flops_per_sample / 2, 17.56e9, rel_tol=0.01)
    # GPT-2 at 1024 tokens: 2 x (params without embeddings) + the attention products, per token
    spec = get_model("gpt2:seq_len=1024")
    per_token = 2 * (85_054_464 + 38_597_376) + 4 * 12 * 1024 * 768
    assert math.isclose(spec.flops_per_sample / 1024, per_token, rel_tol=0.01)


def test_flops_lenet_by_hand():
    conv1 = 2 * 20 * 1 * 25 * 24 * 24
    conv2 = 2 * 50 * 20 * 25 * 8 * 8
    fc = 2 * 800 * 500 + 2 * 500 * 10
    assert get_model("lenet").flops_per_sample == conv1 + conv2 + fc


def test_resnet50_flops_near_published():
    # He et al. report 3.8e9 multiply-adds for ResNet-50 (stride on the 1x1 convolution).
    assert math.isclose(get_model("resnet-50").flops_per_sample / 2, 3.86e9, rel_tol=0.03)


def test_alexnet_r_pooling_rounds_up():
    spec = get_model("alexnet-r")
    shape = spec.input.shape
    sizes = []
    for layer in spec.layers:
        shape = layer.out_shape(shape)
        if isinstance(layer, Pool2d):
            sizes.append(shape[1])
    assert sizes == [16, 8, 4]


def test_pool_ceil_clip_rule():
    # the last window must start inside the input (PyTorch and Caffe clip)
    assert _pool_out(5, 2, 2, 1, True) == 3
    assert _pool_out(32, 3, 2, 0, False) == 15
    assert _pool_out(32, 3, 2, 0, True) == 16


def test_options_and_names():
    assert get_model("alexnet:lrn=0:groups=1").name == "alexnet:groups=1:lrn=0"
    assert get_model("alexnet:groups=1:lrn=0").param_count == get_model("alexnet-s").param_count
    assert parse_model_ref("sae:phase=pretrain2") == ("sae", {"phase": "pretrain2"})
    assert get_model("alexnet").has_dropout and not get_model("alexnet-s").has_dropout


@pytest.mark.parametrize("ref", ["nope", "alexnet:bogus=1", "alexnet:lrn=maybe", "sae:phase=pretrain9", "alexnet:lrn"])
def test_bad_model_refs(ref):
    with pytest.raises(UnknownModelError):
        get_model(ref)


def test_sae_phases_freeze_lower_encoders():
    spec = get_model("sae:phase=pretrain3")
    assert spec.trainable_names() == ["enc3.weight", "enc3.bias", "dec3.bias"]
    assert spec.output_shape == (200,)
    assert spec.loss.kind == "mse"


def test_without_dropout_zeroes_rates():
    spec = get_model("alexnet").without_dropout()
    assert not spec.has_dropout
    assert spec.param_count == get_model("alexnet").param_count


def test_a_transformer_part_names_its_blocks():
    """A part's label listed only the layers outside the blocks ('wte+wpe+ln_f'): the blocks holding
    nearly every parameter were missing from it."""
    from dlbench.models import split

    assert [p.label for p in split.split(verify_spec("gpt2"))] == [
        "wte+wpe", "h0 attention", "h0 mlp", "h1 attention", "h1 mlp+ln_f+wte.head"]
    assert [p.label for p in split.split(verify_spec("vit-b16"))] == [
        "patch+position", "l0 attention", "l0 mlp", "l1 attention", "l1 mlp+ln", "head"]


def test_a_reference_with_a_longer_input_is_gated_at_the_small_forms_size():
    """`gpt2:...:seq_len=64` (a small GPT on the shipped text) and MLPerf's `bert-base:seq_len=384` failed the
    gate before it ran: the reference's length overrode the small form's and overflowed its 16 positions.
    The gate's form keeps its own input size; the other options, and a caller's overrides, still apply."""
    from dlbench.models import verify_spec

    gpt = verify_spec("gpt2:layers=2:dim=128:heads=4:vocab=256:seq_len=64")
    assert gpt.input.shape == (8,) and gpt.input.vocab == 256 and gpt.name.endswith("seq_len=64:vocab=256")
    assert verify_spec("bert-base:seq_len=384").input.shape == (12,)
    assert get_model("bert-base:seq_len=384").input.shape == (384,)  # the measured model is the one asked for
    assert get_model("gpt2:seq_len=64", small=True, seq_len=13).input.shape == (13,)


def test_a_frameworks_gate_form_sizes_a_zoo_models_small_form_but_not_what_the_reference_sets():
    from dlbench.models import gate_form

    form = {"head_dim": 16, "hidden": 96, "no_such_option": 1}
    assert gate_form("smollm2-135m", form) == {"head_dim": 16, "hidden": 96}
    assert gate_form("smollm2-135m:head_dim=32", form) == {"hidden": 96}
    assert gate_form("gpt2", form) == {"hidden": 96}  # gpt2's factory has no head_dim
    assert gate_form("hf:/some/folder", form) == {}  # a checkpoint's shapes are its own
    spec = verify_spec("smollm2-135m", form)
    assert spec.name == "smollm2-135m" and spec.param_shapes()["l0.mlp.w_up"] == (48, 96)
    assert spec.param_shapes()["l0.attn.wq"] == (48, 6 * 16)
    assert verify_spec("smollm2-135m").param_shapes()["l0.attn.wq"] == (48, 48)
