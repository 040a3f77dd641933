"""Are dlbench's Keras transformers as fast as keras-hub's own models? (issue: transformers)

For gpt2 and smollm2-135m (their default shapes), the same canonical weights are loaded into dlbench's
Keras model (the ``keras`` backend: ``frameworks/keras/keras_model.py``) and into keras-hub's ``GPT2CausalLM`` /
``LlamaCausalLM`` (``gate/keras_hub_models.py``, no preset). Same Keras back end (``KERAS_BACKEND``, JAX by
default here: Keras's fastest on a CPU), same ``jit_compile`` as dlbench's Keras backend sets, same batch,
same process; each one's ``predict_on_batch`` is timed step by step in alternation, the order reversed every
round, after the logits are checked to agree. Target: dlbench >= 0.95x keras-hub's throughput, or the note
says why.

    python benchmarks/update_performance.py fidelity_keras_hub
    python benchmarks/fidelity_keras_hub.py --small --rounds 3      # checks the script runs
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
from _common import header, interleaved, ratio_ci  # noqa: E402

MODELS = ["gpt2", "smollm2-135m"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--small", action="store_true", help="the gate's small forms (checks the script, no figure)")
    args = ap.parse_args()
    head = header("dlbench's Keras transformers against keras-hub's" + (" (small forms)" if args.small else ""))
    import keras
    import keras_hub

    from dlbench.data.synthetic import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.frameworks.keras.backend import JIT_COMPILE
    from dlbench.gate.keras_hub_models import keras_hub_causal_lm, keras_hub_inputs
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    dl = get_backend("keras")
    dl.set_threads(args.threads)
    backend = keras.backend.backend()
    rows = []
    for name in args.model.split(","):
        spec = get_model(name, small=args.small)
        weights = init_weights(spec, 0)
        batch = make_batch(spec, args.batch, 0)
        ours = dl.build(spec, weights)
        placed = dl.place(batch, ours)
        fwd = dl.forward(ours, placed)
        hub = keras_hub_causal_lm(spec, weights, jit_compile=JIT_COMPILE[backend])
        theirs = functools.partial(hub.predict_on_batch, keras_hub_inputs(batch.x))
        a, b = np.asarray(fwd(), np.float64), np.asarray(theirs(), np.float64)
        err = float(np.abs(a - b).max() / np.abs(b).max())
        for _ in range(2):  # warm-up: compile and first allocations
            fwd()
            theirs()
        times = interleaved({"dlbench": fwd, "keras-hub": theirs}, args.rounds)
        lo, hi = ratio_ci(times["keras-hub"], times["dlbench"])
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append((name, err, med["dlbench"], med["keras-hub"], med["keras-hub"] / med["dlbench"], lo, hi))
    print(head)
    print(f"- Keras {keras.__version__} on {backend} (jit_compile={JIT_COMPILE[backend]}), keras-hub "
          f"{keras_hub.__version__}; batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds in "
          "alternation; forward (`predict_on_batch`), logits of every position\n")
    print("| model | logit error (relative, max) | dlbench ms | keras-hub ms | dlbench speed / keras-hub's [95% CI] |")
    print("|---|---:|---:|---:|---:|")
    for name, err, ours_ms, hub_ms, ratio, lo, hi in rows:
        print(f"| {name} | {err:.1e} | {ours_ms:,.1f} | {hub_ms:,.1f} | {ratio:.3f} [{lo:.3f}, {hi:.3f}] |")


if __name__ == "__main__":
    main()
