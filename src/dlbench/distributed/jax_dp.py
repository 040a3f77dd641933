"""One JAX data-parallel worker process: ``python -m dlbench.distributed.jax_dp JOB.json OUT_DIR``,
with ``DLBENCH_RANK``, ``DLBENCH_WORLD`` and ``DLBENCH_ADDRS`` (the first address is the
coordinator) in its environment.

JAX's own multi-process engine: ``jax.distributed.initialize`` joins the processes (on the CPU
their collectives run over gloo); one mesh axis ``d`` spans every process's device; parameters
are replicated, the batch is sharded along ``d``, and the train step is a ``jax.shard_map`` whose
gradients are averaged with ``jax.lax.pmean`` over ``d``, then SGD with momentum.

Standalone on purpose (the JAX backend lives on another branch): the network is the spec run by
a small functional interpreter in ``jax.numpy`` / ``jax.lax`` over the canonical weights and
layouts (NCHW, OIHW, dense ``(in, out)``); layers it does not cover raise UnsupportedError.
Its training loss at step 0 equals the NumPy reference's (a test checks it).

What is timed: ``measure`` = the synchronous step; ``compute`` = the same step jitted on this
process's device alone, without the exchange; ``comm`` = the gradient all-reduce alone
(``pmean`` of a gradient-shaped tree across processes), timed on its own: an exchange measured in
isolation, not overlapped with compute as in the full step (XLA may overlap them there).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.distributed import common


class UnsupportedLayer(Exception):
    pass


def forward_fn(spec):
    """``f(params, x) -> (output, marks)`` for ``spec``; training-mode batch norm (batch statistics)."""
    import jax.numpy as jnp
    from jax import lax

    from dlbench.models import layers as L
    from dlbench.models.layers import _pool_out

    def pool(x, layer):
        n, c, h, w = x.shape
        k, s, p = layer.kernel, layer.stride, layer.padding
        oh, ow = (_pool_out(d, k, s, p, layer.ceil_mode) for d in (h, w))
        eh, ew = max(0, (oh - 1) * s + k - (h + 2 * p)), max(0, (ow - 1) * s + k - (w + 2 * p))
        pads = ((0, 0), (0, 0), (p, p + eh), (p, p + ew))
        dims, strides = (1, 1, k, k), (1, 1, s, s)
        if layer.op == "max":
            xp = jnp.pad(x, pads, constant_values=-jnp.inf)
            out = lax.reduce_window(xp, -jnp.inf, lax.max, dims, strides, "VALID")
        else:
            total = lax.reduce_window(jnp.pad(x, pads), 0.0, lax.add, dims, strides, "VALID")
            inside = jnp.pad(jnp.ones((1, 1, h + 2 * p, w + 2 * p), x.dtype), ((0, 0), (0, 0), (0, eh), (0, ew)))
            out = total / lax.reduce_window(inside, 0.0, lax.add, dims, strides, "VALID")
        return out[:, :, :oh, :ow]

    acts = {"relu": lambda v: jnp.maximum(v, 0.0), "tanh": jnp.tanh, "sigmoid": lambda v: 0.5 * (1 + jnp.tanh(0.5 * v))}

    def run(layers, x, p, marks):
        for layer in layers:
            if isinstance(layer, L.Conv2d):
                x = lax.conv_general_dilated(x, p[f"{layer.name}.weight"], (layer.stride,) * 2,
                                             [(layer.padding,) * 2] * 2, dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                             feature_group_count=layer.groups)
                if layer.bias:
                    x = x + p[f"{layer.name}.bias"][None, :, None, None]
            elif isinstance(layer, L.Pool2d):
                x = pool(x, layer)
            elif isinstance(layer, L.GlobalAvgPool):
                x = x.mean(axis=(2, 3))
            elif isinstance(layer, L.BatchNorm):
                axes = (0, 2, 3) if x.ndim == 4 else (0,)
                shape = (1, -1) + (1,) * (x.ndim - 2)
                mean, var = x.mean(axis=axes), x.var(axis=axes)
                x = (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + layer.eps) \
                    * p[f"{layer.name}.gamma"].reshape(shape) + p[f"{layer.name}.beta"].reshape(shape)
            elif isinstance(layer, L.Dense):
                x = x @ p[f"{layer.name}.weight"] + (p[f"{layer.name}.bias"] if layer.bias else 0.0)
            elif isinstance(layer, L.TiedDense):
                x = x @ p[f"{layer.tied_to}.weight"].T + p[f"{layer.name}.bias"]
            elif isinstance(layer, L.Activation):
                x = acts[layer.fn](x)
            elif isinstance(layer, L.Dropout) and layer.rate == 0:
                pass
            elif isinstance(layer, L.Mark):
                marks[layer.name] = x
            elif isinstance(layer, L.Flatten):
                x = x.reshape(x.shape[0], -1)
            elif isinstance(layer, L.ZeroPadShortcut):
                x = x[:, :, ::layer.stride, ::layer.stride]
                x = jnp.pad(x, ((0, 0), (0, layer.out_channels - x.shape[1]), (0, 0), (0, 0)))
            elif isinstance(layer, L.Residual):
                body = run(layer.body, x, p, marks)
                short = run(layer.shortcut, x, p, marks)
                x = body + short
                if layer.post == "relu":
                    x = jnp.maximum(x, 0.0)
            else:
                raise UnsupportedLayer(f"the standalone JAX data-parallel worker has no rule for {layer.kind}"
                                       + (f" (rate {layer.rate})" if isinstance(layer, L.Dropout) else ""))
        return x

    def f(params, x):
        marks: dict = {}
        return run(spec.layers, x, params, marks), marks
    _check(spec, UnsupportedLayer)  # say which layer is missing before any tracing starts
    return f


def _check(spec, exc) -> None:
    from dlbench.models import layers as L

    ok = (L.Conv2d, L.Pool2d, L.GlobalAvgPool, L.BatchNorm, L.Dense, L.TiedDense, L.Activation, L.Mark, L.Flatten,
          L.ZeroPadShortcut, L.Residual)
    for layer in L.walk(spec.layers):
        if isinstance(layer, L.Dropout) and layer.rate == 0:
            continue
        if not isinstance(layer, ok):
            raise exc(f"the standalone data-parallel worker has no rule for {layer.kind}"
                      + (f" (rate {layer.rate})" if isinstance(layer, L.Dropout) else ""))


def loss_fn(spec):
    import jax
    import jax.numpy as jnp

    fwd = forward_fn(spec)

    def loss(params, x, y):
        out, marks = fwd(params, x)
        if spec.loss.kind == "mse":
            target = marks.get(spec.loss.target, x)
            return jnp.mean((out - target) ** 2)
        logits = out.reshape(-1, out.shape[-1])
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1).mean()
    return loss


def run(job: dict[str, Any], out_dir: Path) -> dict[str, Any] | None:
    rank, world = int(os.environ["DLBENCH_RANK"]), int(os.environ["DLBENCH_WORLD"])
    coordinator = os.environ["DLBENCH_ADDRS"].split(",")[0]
    (out_dir / f"pid.{rank}").write_text(str(os.getpid()))
    cores = common.pin_cores(int(os.environ.get("DLBENCH_CORE_OFFSET", rank)), job.get("threads"))

    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from dlbench.models import get_model
    from dlbench.weights import init_weights

    spec = get_model(job["model"], small=bool(job.get("small")))
    try:
        loss = loss_fn(spec)
    except UnsupportedLayer as exc:
        if rank == 0:
            common.write_json(out_dir / "result.json", {"unsupported": str(exc)})
        return None
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=world, process_id=rank,
                               initialization_timeout=int(job.get("collective_timeout_s", 120)))
    try:
        seed = int(job.get("seed", 0))
        weights = init_weights(spec, seed)
        trainable = spec.trainable_names()
        data = common.shard(spec, int(job["global_batch"]), rank, world, seed)
        lr, momentum = spec.learning_rate, 0.9
        mesh = Mesh(np.array(jax.devices()), ("d",))
        bat = NamedSharding(mesh, P("d"))

        def put_rep(tree):
            return jax.tree.map(lambda a: multihost_utils.host_local_array_to_global_array(a, mesh, P()), tree)

        params = put_rep({k: jnp.asarray(weights.params[k]) for k in trainable})
        frozen = {k: jnp.asarray(v) for k, v in weights.params.items() if k not in trainable}
        mom = put_rep({k: jnp.zeros_like(v) for k, v in params.items()})
        x = jax.make_array_from_process_local_data(bat, data.x)
        y = jax.make_array_from_process_local_data(bat, data.y)

        def grads_of(p, xs, ys):
            return jax.grad(lambda q: loss({**q, **frozen}, xs, ys))(p)

        def update(p, m, g):
            m = jax.tree.map(lambda mm, gg: momentum * mm + gg, m, g)
            return jax.tree.map(lambda pp, mm: pp - lr * mm, p, m), m

        def dp_step(p, m, xs, ys):
            return update(p, m, jax.lax.pmean(grads_of(p, xs, ys), "d"))

        step = jax.jit(jax.shard_map(dp_step, mesh=mesh, in_specs=(P(), P(), P("d"), P("d")), out_specs=(P(), P())))
        exchange = jax.jit(jax.shard_map(lambda g: jax.lax.pmean(g, "d"), mesh=mesh, in_specs=P(), out_specs=P()))
        local_dev = jax.local_devices()[0]
        local_step = jax.jit(lambda p, m, xs, ys: update(p, m, grads_of(p, xs, ys)))  # runs where its inputs are
        lp = jax.device_put({k: np.asarray(weights.params[k]) for k in trainable}, local_dev)
        lm = jax.device_put({k: np.zeros_like(weights.params[k]) for k in trainable}, local_dev)
        lx, ly = jax.device_put(data.x, local_dev), jax.device_put(data.y, local_dev)
        gtree = put_rep({k: jnp.ones_like(v) for k, v in params.items()})

        def timed(fn) -> float:
            t0 = time.perf_counter_ns()
            jax.block_until_ready(fn())
            return float(time.perf_counter_ns() - t0)

        state = {"p": params, "m": mom}

        def synced():
            state["p"], state["m"] = step(state["p"], state["m"], x, y)
            return state["p"]

        protocol = job.get("protocol", {})
        warmup_ns = [timed(synced) for _ in range(max(1, int(protocol.get("warmup", 3))))]
        steps = int(multihost_utils.broadcast_one_to_all(np.int64(common.steps_to_time(warmup_ns, protocol))))
        local = {"p": lp, "m": lm}

        def alone():
            local["p"], local["m"] = local_step(local["p"], local["m"], lx, ly)
            return local["p"]
        timed(alone)  # compile
        compute_ns = [timed(alone) for _ in range(steps)]
        timed(lambda: exchange(gtree))
        comm_ns = []
        for _ in range(steps):
            comm_ns.append(timed(lambda: exchange(gtree)))
        step_ns = []
        with common.WireWindow(os.environ.get("DLBENCH_IFACE"),
                               lambda: multihost_utils.sync_global_devices("measure")) as wire:
            for i in range(steps):
                step_ns.append(timed(synced))
                if common.fault_due(job, rank, len(warmup_ns) + i):
                    os.kill(os.getpid(), 9)
        mine = {k: np.asarray(v.addressable_shards[0].data) for k, v in state["p"].items()}
        dig = common.digest(mine)
        digests = multihost_utils.process_allgather(np.frombuffer(bytes.fromhex(dig), np.uint8))
        moved = -1 if wire.moved is None else wire.moved
        ifaces = multihost_utils.process_allgather(np.int64(moved))
        cols = {name: multihost_utils.process_allgather(np.asarray(vals, np.float64))
                for name, vals in (("warmup_ns", warmup_ns), ("step_ns", step_ns), ("comm_ns", comm_ns),
                                   ("compute_ns", compute_ns))}
        grad_bytes = sum(weights.params[k].nbytes for k in trainable)
        per_rank = [{"rank": r, **{k: v[r].tolist() for k, v in cols.items()}, "digest": bytes(digests[r]).hex(),
                     "payload_bytes": [grad_bytes] * steps, "steps": steps,
                     "iface_bytes": None if int(ifaces[r]) < 0 else int(ifaces[r]),
                     "cores": cores if r == rank else None} for r in range(world)]
        result = {"per_rank": per_rank, "world": world, "local_world": 1, "nnodes": world, "grad_bytes": grad_bytes,
                  "param_count": spec.param_count, "dist_backend": "jax.distributed (gloo on CPU)",
                  "versions": common.versions(("jax", "jaxlib")),
                  "comm_method": "pmean of a gradient-shaped tree across processes, timed alone",
                  "compute_method": "the same step jitted on this process's device without the exchange"}
        if rank == 0:
            common.write_json(out_dir / "result.json", result)
        multihost_utils.sync_global_devices("done")
        return result
    finally:
        jax.distributed.shutdown()


def main(argv: list[str]) -> int:
    return common.worker_main(argv, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
