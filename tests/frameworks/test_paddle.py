"""PaddlePaddle in its environment: the gate on both variants (LeNet; DLBENCH_TEST_ALL_MODELS=1
adds the LSTM and ResNet-56), and a to_static training step that really
differentiates and updates (a step timed about equal to a forward once made that suspicious)."""

from dlbench.api import verify
from tests.conftest import env_models, part_input_gradient_shapes, profile_in_framework, requires_framework, run_in_framework

pytestmark = requires_framework("paddle")


def test_gate_passes_on_both_variants():
    results = verify(models=env_models(["lenet"], ["lstm-imdb", "resnet-56"]), frameworks=["paddle"],
                     variants=["all"])
    assert all(r.verdict == "pass" for r in results), [(r.model, r.variant, r.reason) for r in results
                                                       if r.verdict != "pass"]


def test_transformers_pass_the_gate_on_both_variants():
    """Paddle's SDPA attention (frameworks/paddle/layers.py), with the gate's causal and padding mask checks
    and both optimisers' update check: GPT-2 (learned positions, tied head) and SmolLM2 (RoPE, grouped-query
    attention, RMSNorm, SwiGLU) here; BERT (padding mask, post-norm) and ViT (patches) in the nightly set."""
    results = verify(models=env_models(["gpt2", "smollm2-135m"], ["bert-base", "vit-b16"]), frameworks=["paddle"],
                     variants=["all"])
    assert results and all(r.verdict == "pass" for r in results), [(r.model, r.variant, r.reason) for r in results
                                                                    if r.verdict != "pass"]


def test_to_static_train_step_computes_gradients_and_updates_every_parameter():
    out = run_in_framework("paddle", """
        import json, numpy as np
        from dlbench.frameworks.paddle.backend import PaddleBackend
        from dlbench.frameworks.base import OptimizerSpec
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        b = PaddleBackend(); threads = b.set_threads(2)
        spec = get_model("lenet")
        m = b.build(spec, init_weights(spec, 0), "cpu", "to_static"); p = b.place(make_batch(spec, 32, 0), m)
        loss, grads = b.loss_and_grads(m, p)
        before = b.get_params(m)
        step = b.train_step(m, p, OptimizerSpec(lr=0.01))
        first = float(step().numpy())
        after_one = b.get_params(m)
        losses = [first] + [float(step().numpy()) for _ in range(4)]
        print(json.dumps({
            "static": type(m.loss.forward).__name__, "programs": len(m.loss.forward.program_cache),
            "grad_norms": {k: float(np.abs(g).sum()) for k, g in grads.items()},
            "changed": {k: bool((after_one[k] != before[k]).any()) for k in before},
            "losses": losses, "threads": threads}))
    """)
    assert out["static"].endswith("StaticFunction") and out["programs"] >= 1
    assert all(v > 0 for v in out["grad_norms"].values()), out["grad_norms"]
    assert all(out["changed"].values()), out["changed"]
    losses = out["losses"]
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert out["threads"]["paddle_num_threads"] == 2


def test_a_parts_gradient_differentiates_its_input():
    shapes = part_input_gradient_shapes("paddle", "PaddleBackend", "None if p['x'].grad is None else p['x'].grad.numpy()")
    assert shapes == [None, [4, 20, 12, 12], [4, 50, 4, 4]], shapes


def test_profile_writes_a_chrome_trace_of_its_operations():
    p = profile_in_framework("paddle", "PaddleBackend")
    assert p["chrome_fields"] and p["calls"] == 2 and p["ops"] and p["self_us_total"] > 0, p
    names = [op["name"] for op in p["ops"]]
    assert any("matmul" in n for n in names), names
