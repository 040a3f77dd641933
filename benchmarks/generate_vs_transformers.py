"""dlbench's torch decoder held against Hugging Face transformers' ``generate()``: the same weights, the
same prompts, greedy, each with its own cache, timed in the same process in alternation, and the same
tokens required.

The transformers model is built from a config made here from the spec (no hub: ``GPT2Config`` /
``LlamaConfig`` with the spec's sizes, dropout 0, no end-of-sequence token so every generation runs its
full length) and loaded with dlbench's canonical weights (GPT-2's fused ``c_attn`` is the spec's q, k, v
side by side; Llama's ``nn.Linear`` weights are the spec's transposed). transformers' cache is its
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
from dlbench.models import layers as L  # noqa: E402
from dlbench.scenarios.generate import generation_spec, prompts  # noqa: E402
from dlbench.weights import init_weights  # noqa: E402


def _first(spec, kind):
    return next(layer for layer in L.walk(spec.layers) if isinstance(layer, kind))


def hf_model(spec, weights, cache: str = "dynamic"):
    """The spec as a transformers causal LM holding ``weights`` (eval mode, float32)."""
    import torch
    import transformers

    emb = _first(spec, L.Embedding)
    attn = [layer for layer in L.walk(spec.layers) if isinstance(layer, L.Attention)]
    heads, kv, hd = attn[0].dims(emb.dim)
    p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.params.items()}
    state = {}
    if any(isinstance(layer, L.PositionEmbedding) for layer in L.walk(spec.layers)):  # GPT-2
        fc = next(layer for layer in L.walk(spec.layers) if isinstance(layer, L.Dense))
        config = transformers.GPT2Config(
            vocab_size=emb.vocab, n_positions=_first(spec, L.PositionEmbedding).max_len, n_embd=emb.dim,
            n_layer=len(attn), n_head=heads, n_inner=fc.units, activation_function="gelu_new",
            layer_norm_epsilon=_first(spec, L.LayerNorm).eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=None, eos_token_id=None, tie_word_embeddings=True)
        model = transformers.GPT2LMHeadModel(config)
        state = {"transformer.wte.weight": p["wte.weight"], "transformer.wpe.weight": p["wpe.weight"],
                 "transformer.ln_f.weight": p["ln_f.weight"], "transformer.ln_f.bias": p["ln_f.bias"]}
        for i in range(len(attn)):
            h, n = f"transformer.h.{i}", f"h{i}"
            state.update({
                f"{h}.ln_1.weight": p[f"{n}.ln1.weight"], f"{h}.ln_1.bias": p[f"{n}.ln1.bias"],
                f"{h}.ln_2.weight": p[f"{n}.ln2.weight"], f"{h}.ln_2.bias": p[f"{n}.ln2.bias"],
                # Conv1D holds (in, out), the canonical layout; c_attn is q, k, v side by side
                f"{h}.attn.c_attn.weight": torch.cat([p[f"{n}.attn.w{x}"] for x in "qkv"], dim=1),
                f"{h}.attn.c_attn.bias": torch.cat([p[f"{n}.attn.b{x}"] for x in "qkv"]),
                f"{h}.attn.c_proj.weight": p[f"{n}.attn.wo"], f"{h}.attn.c_proj.bias": p[f"{n}.attn.bo"],
                f"{h}.mlp.c_fc.weight": p[f"{n}.mlp.fc.weight"], f"{h}.mlp.c_fc.bias": p[f"{n}.mlp.fc.bias"],
                f"{h}.mlp.c_proj.weight": p[f"{n}.mlp.proj.weight"], f"{h}.mlp.c_proj.bias": p[f"{n}.mlp.proj.bias"]})
    else:  # Llama (SmolLM2)
        config = transformers.LlamaConfig(
            vocab_size=emb.vocab, hidden_size=emb.dim, intermediate_size=_first(spec, L.SwiGLU).hidden,
            num_hidden_layers=len(attn), num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd,
            rms_norm_eps=_first(spec, L.RMSNorm).eps, rope_theta=attn[0].rope_theta,
            max_position_embeddings=spec.options.get("context", spec.input.shape[0]), tie_word_embeddings=True,
            attention_bias=False, mlp_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        model = transformers.LlamaForCausalLM(config)
        state = {"model.embed_tokens.weight": p["embed.weight"], "model.norm.weight": p["norm.weight"]}
        for i in range(len(attn)):
            m, n = f"model.layers.{i}", f"l{i}"
            state.update({f"{m}.input_layernorm.weight": p[f"{n}.attn_norm.weight"],
                          f"{m}.post_attention_layernorm.weight": p[f"{n}.mlp_norm.weight"]})
            state.update({f"{m}.self_attn.{x}_proj.weight": p[f"{n}.attn.w{x}"].T for x in "qkvo"})
            state.update({f"{m}.mlp.{x}_proj.weight": p[f"{n}.mlp.w_{x}"].T for x in ("gate", "up", "down")})
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        raise ValueError(f"transformers' {type(model).__name__}: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.tie_weights()
    model.generation_config.cache_implementation = None if cache == "dynamic" else cache
    return model.eval()


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
