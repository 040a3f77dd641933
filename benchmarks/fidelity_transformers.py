"""Are dlbench's torch transformers as fast as Hugging Face ``transformers``' own classes? (issue: transformers)

For each model (bert-base, gpt2, vit-b16, smollm2-135m at their default shapes), the same canonical
weights are loaded into dlbench's torch model and into ``transformers``' class (BertForSequenceClassification,
GPT2LMHeadModel, ViTForImageClassification, LlamaForCausalLM; SDPA attention, dropout off; configs written
locally, see ``dlbench/gate/hf_transformers.py``). Same batch, same threads, same process; forward (inference
mode) and a training step (forward, the spec's cross-entropy on the same labels, backward, SGD with
momentum) are timed step by step in alternation, the order reversed every round, and the logits are
first checked to agree. Target: dlbench >= 0.95x the throughput of ``transformers``, or the note says why.

``--small`` runs the gate's small forms (a check that the script works, not a measurement).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
import torch.nn.functional as F
from _common import header, interleaved, ratio_ci

MODELS = ["bert-base", "gpt2", "vit-b16", "smollm2-135m"]


def hf_step(model, inputs: dict, y: torch.Tensor, lr: float):
    """One training step of the Hugging Face model with the same loss and optimiser as dlbench's torch
    backend (softmax cross-entropy, mean over samples and steps; fused SGD with momentum 0.9)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, fused=True)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(**inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return step


def hf_forward(model, inputs: dict):
    def run():
        with torch.inference_mode():
            return model(**inputs).logits
    return run


def compare(name: str, batch_size: int, rounds: int, small: bool) -> list[str]:
    from dlbench.data.synthetic import make_batch
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.hf_transformers import hf_inputs, hf_model
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights
    from dlbench.scenarios.timed import make_closure

    spec = get_model(name, small=small)
    weights = init_weights(spec, 0)
    batch = make_batch(spec, batch_size, 0)
    backend = TorchBackend()
    lines = []
    for scenario in ("forward", "train_step"):
        ours_model = backend.build(spec, weights)
        placed = backend.place(batch, ours_model)
        hf = hf_model(spec, weights, "sdpa")
        inputs = hf_inputs(spec, batch)
        if scenario == "forward":
            ours = make_closure("forward", backend, ours_model, placed, spec)
            theirs = hf_forward(hf, inputs)
            a, b = backend.to_numpy(ours()), hf(**inputs).logits.detach().numpy()
            if batch.mask is not None and a.ndim == 3:
                a, b = (np.where(batch.mask[..., None] > 0, v, 0.0) for v in (a, b))
            err = float(np.linalg.norm(a - b) / np.linalg.norm(b))
            assert err <= 1e-4, f"{name}: logits differ by {err:.2e}"
        else:
            hf.train()
            ours = make_closure("train_step", backend, ours_model, placed, spec)
            theirs = hf_step(hf, inputs, torch.from_numpy(batch.y), spec.learning_rate)
        interleaved({"ours": ours, "theirs": theirs}, 2)  # warm-up
        t = interleaved({"ours": ours, "theirs": theirs}, rounds)
        mo, mt = statistics.median(t["ours"]), statistics.median(t["theirs"])
        lo, hi = ratio_ci(t["theirs"], t["ours"])
        lines.append(f"| {spec.name} | {scenario} | {mt * 1e3:.1f} | {mo * 1e3:.1f} | **{mt / mo:.3f}** "
                     f"[{lo:.3f}, {hi:.3f}] |" + (f" logits {err:.1e} |" if scenario == "forward" else " |"))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--rounds", type=int, default=10, help="timed steps of each, alternating")
    ap.add_argument("--small", action="store_true", help="the gate's small forms: checks the script, measures nothing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    rows = []
    for name in args.models.split(","):
        rows += compare(name, args.batch, args.rounds, args.small)
    print(header("transformers fidelity: dlbench torch vs Hugging Face transformers"))
    print(f"- torch {torch.__version__}, transformers {transformers.__version__} (SDPA attention), batch {args.batch}, "
          f"{args.threads} thread(s), {args.rounds} steps each, alternating; the same weights and batch, the models' "
          "default sequence lengths\n")
    print("| model | scenario | transformers ms | dlbench ms | throughput ratio dlbench / transformers [95% CI] | |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n- target: ratio >= 0.95")


if __name__ == "__main__":
    main()
