"""dlbench's torch decoder held against Hugging Face transformers' ``generate()``: the same weights, the
same prompts, greedy, each with its own cache, timed in the same process in alternation, and the same
tokens required.

The transformers model is :mod:`dlbench.gate.hf_transformers`' (``GPT2LMHeadModel`` / ``LlamaForCausalLM``
from a config written locally, no hub, holding dlbench's canonical weights), with no end-of-sequence
token so every generation runs its full length. transformers' cache is its
default (``DynamicCache``); ``--hf-cache static`` uses its ``StaticCache``. TTFT and TPOT of both are
taken the same way: the time each new token reaches the host (transformers: its streamer's ``put``).

    python benchmarks/generate_vs_transformers.py --model gpt2,smollm2-135m --batch 1,4 --rounds 10
    python benchmarks/generate_vs_transformers.py --small --rounds 2       # a quick check of the script

Prints a docs/generation.md fragment: per model and batch, each engine's median generation time,
TTFT, TPOT and tokens/s, and the ratio transformers / dlbench with a bootstrap interval. Exits 1 if a
generation's tokens differ.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _common import header, ratio_ci  # noqa: E402

from dlbench.generation.decoder import greedy, make_decoder  # noqa: E402
from dlbench.models import get_model  # noqa: E402
from dlbench.models.weights import init_weights  # noqa: E402
from dlbench.scenarios.generate import generation_spec, prompts  # noqa: E402


def hf_model(spec, weights, cache: str = "dynamic"):
    """The spec as transformers builds it (:func:`dlbench.gate.hf_transformers.hf_model`: a config written
    locally, dlbench's canonical weights), set up for greedy generation of a fixed length: no
    end-of-sequence token, ``cache`` its cache (``dynamic``: its default)."""
    from dlbench.gate.hf_transformers import hf_model as build

    model = build(spec, weights)
    g = model.generation_config
    g.eos_token_id = g.bos_token_id = g.pad_token_id = None
    g.cache_implementation = None if cache == "dynamic" else cache
    return model


class _Clock:
    """A transformers streamer that notes when each new token reaches it (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.seen_prompt = False

    def put(self, value) -> None:
        if self.seen_prompt:
            self.times.append(time.perf_counter())
        self.seen_prompt = True

    def end(self) -> None:
        pass


def hf_generate(model, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float, list[float]]:
    """transformers' greedy generate(): the new tokens (batch, new), TTFT and each later token's seconds.
    (Its streamer takes batch 1 only; at larger batches the times are the whole generation's share.)"""
    import torch

    ids = torch.from_numpy(prompt)
    clock = _Clock() if prompt.shape[0] == 1 else None
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, num_beams=1, streamer=clock)
    total = time.perf_counter() - t0
    if clock is None or len(clock.times) != new_tokens:
        return out[:, prompt.shape[1]:].numpy(), float("nan"), [total / new_tokens] * (new_tokens - 1)
    times = [t0, *clock.times]
    return out[:, prompt.shape[1]:].numpy(), times[1] - t0, list(np.diff(times[1:]))


def dlbench_generate(decoder, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float, list[float]]:
    gen = greedy(decoder, prompt, new_tokens)
    return gen.tokens, gen.ttft_ns / 1e9, [t / 1e9 for t in gen.tpot_ns]


def compare(model_ref: str, batch: int, prompt_len: int, new_tokens: int, rounds: int, small: bool,
            variant: str, cache: str, seed: int = 0) -> dict:
    """Both engines on the same weights and prompts, alternating, order reversed every round."""
    spec = (get_model(model_ref, small=True, seq_len=prompt_len + new_tokens).without_dropout() if small
            else generation_spec(model_ref, prompt_len, new_tokens))
    weights = init_weights(spec, seed)
    hf = hf_model(spec, weights, cache)
    ours = make_decoder("torch", spec, weights, batch, prompt_len + new_tokens, "fp32", variant)
    engines = {"transformers": lambda p: hf_generate(hf, p, new_tokens),
               f"dlbench torch/{variant}": lambda p: dlbench_generate(ours, p, new_tokens)}
    warm = prompts(spec.input.vocab, batch, prompt_len, seed, rounds)
    for run in engines.values():
        run(warm)
    times: dict[str, dict[str, list[float]]] = {n: {"total": [], "ttft": [], "tpot": []} for n in engines}
    disagreements = 0
    for r in range(rounds):
        prompt = prompts(spec.input.vocab, batch, prompt_len, seed, r)
        tokens = {}
        for name in (list(engines) if r % 2 == 0 else list(reversed(engines))):
            t0 = time.perf_counter()
            tokens[name], ttft, tpot = engines[name](prompt)
            times[name]["total"].append(time.perf_counter() - t0)
            times[name]["ttft"].append(ttft)
            times[name]["tpot"] += tpot
        a, b = tokens.values()
        disagreements += int((a != b).any())
    return {"model": spec.name, "batch": batch, "times": times, "disagreements": disagreements, "rounds": rounds,
            "new_tokens": new_tokens}


def fragment(results: list[dict], args) -> str:
    lines = [header(f"Generation: dlbench's torch decoder and transformers' generate(), prompt {args.prompt_len}, "
                    f"{args.new_tokens} new tokens, {args.rounds} rounds"), "",
             "| model | batch | engine | generation ms | TTFT ms | TPOT ms | tokens/s total | transformers / dlbench "
             "(time) [95% CI] | tokens equal |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        names = list(res["times"])
        hf, ours = (res["times"][n]["total"] for n in names)
        ratio = statistics.median(hf) / statistics.median(ours)
        lo, hi = ratio_ci(hf, ours)
        for name in names:
            t = res["times"][name]
            med = statistics.median(t["total"])
            ttft = statistics.median(x for x in t["ttft"] if x == x) if any(x == x for x in t["ttft"]) else float("nan")
            ttft_text = "–" if ttft != ttft else f"{ttft * 1e3:.1f}"
            lines.append(f"| {res['model']} | {res['batch']} | {name} | {med * 1e3:.1f} | {ttft_text} | "
                         f"{statistics.median(t['tpot']) * 1e3:.2f} | {res['batch'] * res['new_tokens'] / med:.1f} | "
                         + (f"{ratio:.2f} [{lo:.2f}, {hi:.2f}]" if name == names[0] else "")
                         + f" | {res['rounds'] - res['disagreements']}/{res['rounds']} |")
    lines.append("")
    lines.append("transformers' TTFT and TPOT come from its streamer at batch 1; at larger batches its streamer does "
                 "not apply and TTFT is not given (TPOT: the generation's time over its tokens).")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2,smollm2-135m")
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--variant", default="eager", choices=("eager", "compile"))
    ap.add_argument("--hf-cache", default="dynamic", choices=("dynamic", "static"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--small", action="store_true", help="the models' small forms (a quick check of the script)")
    args = ap.parse_args()
    if args.small:
        args.prompt_len, args.new_tokens = min(args.prompt_len, 6), min(args.new_tokens, 8)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    results = [compare(m, int(b), args.prompt_len, args.new_tokens, args.rounds, args.small, args.variant,
                       args.hf_cache) for m in args.model.split(",") for b in args.batch.split(",")]
    print(fragment(results, args))
    return 1 if any(r["disagreements"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
