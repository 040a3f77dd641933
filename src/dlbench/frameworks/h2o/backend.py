"""H2O-3 backend: H2O's deep learning (``H2ODeepLearningEstimator``), a multilayer perceptron trained
inside a local H2O cluster (a JVM).

Runs in its own environment (``dlbench envs create h2o``: the ``h2o`` wheel, which bundles
``h2o.jar``; a Java runtime must be on the PATH). What H2O can express: fully connected networks with
one activation for every hidden layer and a softmax output (``fcn-r``, ``fcn-s`` and the fine-tuning
``sae``); everything else raises :class:`UnsupportedError` with the reason (no convolution, pooling,
recurrent or embedding layers; its autoencoder has untied weights).

What it measures, honestly labelled (see :mod:`dlbench.scenarios`): H2O trains and scores whole
frames in the JVM, so it cannot time one batch's forward or gradient. It measures

* ``epoch`` (stands in for ``train_step``): one training epoch over a frame of the batch's first
  ``DLBENCH_H2O_SAMPLES`` samples (default 64; all of them when the batch is smaller), from the
  canonical weights each time; reported as samples/s over the samples the call processed (the cell
  records ``call_samples`` and a warning when that is fewer than the batch). The cap exists because
  H2O updates the weights once per sample: on 2 cores an FCN-R epoch over 1024 samples takes about
  7 minutes, so the default batch could not finish a first call and one timed call inside the cell's
  timeout. Samples/s does not depend on the frame's length beyond the per-call overhead (REST call,
  job, final scoring), which a short frame weighs more: raise the cap on a fast machine. The call is H2O's own
  ``train()``: a REST call, a job on the cluster, training, and H2O's end-of-training scoring on the
  training frame, which H2O always does. H2O's own reported training speed (samples/s, from its
  scoring history) is stored beside it in the cell's ``framework_metrics``.
* ``predict`` (stands in for ``forward``): ``model.predict(frame)`` over the same frame, already in
  the cluster; the result stays in the cluster (a new frame).

Parallelism: H2O's deep learning is Hogwild-style asynchronous SGD: every thread (``-nthreads``)
trains on its own rows and updates the shared weights without locks, one sample per update
(``mini_batch_size=1``, H2O's default and design). Its throughput is therefore not a per-batch
quantity and its training is not the same computation as a synchronous mini-batch step.

Settings (the fair equivalents of the other backends'): ``adaptive_rate=False`` (H2O's default is
ADADELTA) with ``rate`` = the spec's learning rate, ``momentum_start = momentum_stable = 0.9``,
``nesterov_accelerated_gradient=False``, ``rate_annealing=0``, no L1/L2, ``standardize=False`` and
``ignore_const_cols=False`` (inputs are used as given), ``epochs=1``, ``train_samples_per_iteration=-1``
(one iteration = the epoch), ``score_each_iteration=False``, ``shuffle_training_data=False``, and the
extras that cost time without being training switched off: ``variable_importances=False`` (H2O's
default computes Gedeon importances over all first-layer weights when it scores: minutes for FCN-R),
``diagnostics=False``, ``export_weights_and_biases=False``.

Sigmoid: H2O has no sigmoid activation (tanh, rectifier, maxout). Since
``sigmoid(z) = (1 + tanh(z / 2)) / 2`` exactly, a sigmoid network is built as the tanh network with
rescaled weights that computes the same function: hidden layer 1 gets ``W/2, b/2``; a later layer
``W/4, (b + colsum(W)/2)/2``; the linear output layer ``W/2, b + colsum(W)/2``. The forward (checked by
the gate) is the spec's function; training then follows tanh-parameter SGD, which has the same cost
per sample as sigmoid SGD but not the same trajectory.

The gate: weights are loaded with ``initial_weights``/``initial_biases`` (H2OFrames, one per layer) into
a model trained with ``rate=0`` and no momentum on one row per class (so its output layer has every
class, in order: labels are ``c00000``, ``c00001``, ... because H2O sorts class names as strings); the
weights it holds are the canonical ones. ``predict`` returns class probabilities only, so the backend
declares ``output = "probabilities"`` and the gate compares the softmax of the reference's output.
There is no gradient API, so the gate checks parameters and forward only.

The cluster: started by this process (``java -jar h2o.jar`` with a unique ``-name``, ``-ip 127.0.0.1``
and a free port, ``-nthreads`` = the cell's threads) in the measuring process's own process group, so
the launcher's kill reaches it even on a timeout (``h2o.init`` would start it in a new session,
outside that group); it is shut down (``h2o.cluster().shutdown()``, then the process is killed if it
lingers) when the process exits. Its JVM heap is ``DLBENCH_H2O_XMX`` (default 4g).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2o
import numpy as np
from h2o.estimators import H2ODeepLearningEstimator

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.h2o import DECLARATION
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

ACTIVATIONS = {"tanh": "Tanh", "relu": "Rectifier", "sigmoid": "Tanh"}  # sigmoid: rescaled tanh (see above)
NO_GRADIENT = ("h2o exposes no gradients (training runs whole epochs inside the JVM): "
               "the gate checks parameters and forward only")


def samples_cap() -> int:
    """How many of a batch's samples one ``epoch`` or ``predict`` call processes (``DLBENCH_H2O_SAMPLES``)."""
    raw = os.environ.get("DLBENCH_H2O_SAMPLES", "64")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"DLBENCH_H2O_SAMPLES must be a positive integer, got {raw!r}")
    return int(raw)


def _free_port() -> int:
    """An even port p with p and p + 1 free (H2O uses both)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1] & ~1
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for the H2O cluster")


class Cluster:
    """A local one-node H2O cluster owned by this process."""

    def __init__(self, threads: int | None):
        jar = Path(h2o.__file__).parent / "backend" / "bin" / "h2o.jar"
        java = shutil.which("java")
        if java is None:
            raise UnsupportedError("h2o needs a Java runtime (java) on the PATH to start its cluster")
        self.name = f"dlbench-h2o-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp = tempfile.mkdtemp(prefix="dlbench-h2o-")
        self.port = _free_port()
        cmd = [java, f"-Xmx{os.environ.get('DLBENCH_H2O_XMX', '4g')}", "-jar", str(jar), "-name", self.name,
               "-ip", "127.0.0.1", "-web_ip", "127.0.0.1", "-port", str(self.port), "-ice_root", self.tmp,
               "-log_dir", self.tmp, "-allow_unsupported_java"]
        if threads:
            cmd += ["-nthreads", str(threads)]
        self.log = open(os.path.join(self.tmp, "stdout.txt"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        atexit.register(self.stop)
        deadline = time.time() + 120
        while True:
            try:
                h2o.connect(ip="127.0.0.1", port=self.port, verbose=False)
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"the H2O cluster did not start: {Path(self.tmp, 'stdout.txt').read_text()[-800:]}"
                                       ) from None
                time.sleep(0.5)
        h2o.no_progress()
        self.nthreads = int(h2o.cluster().nodes[0]["nthreads"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            # ask the cluster to shut down, then make sure: a JVM asked from a measuring process was
            # seen to linger 30 s after acknowledging the request (nothing of it is needed any more)
            for stop in (lambda: h2o.cluster().shutdown(), self.proc.terminate, self.proc.kill):
                try:
                    stop()
                    self.proc.wait(timeout=5)
                    break
                except Exception:
                    continue
            self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class Plan:
    """The spec as H2O sees it: hidden sizes, the activation, and how canonical weights map."""

    dense: list[L.Dense]
    hidden: list[int]
    activation: str  # spec name: sigmoid, tanh, relu


def plan_of(spec: ModelSpec) -> Plan:
    """The spec as an H2O MLP, or UnsupportedError with the reason."""
    if spec.loss.kind != "softmax_ce":
        raise UnsupportedError(f"h2o deep learning trains classifiers here (softmax output); {spec.name} has a "
                               f"{spec.loss.kind} loss (H2O's autoencoder mode has untied weights and no frozen layers, "
                               "so not even the SAE pre-training phases can be expressed)")
    if spec.input.labels != "class":
        raise UnsupportedError(f"h2o deep learning trains classifiers here (softmax output), one class per sample; "
                               f"{spec.name} has {spec.input.labels} labels")
    if spec.input.kind != "vector":
        raise UnsupportedError(f"h2o deep learning builds multilayer perceptrons only (no convolution, pooling, embedding "
                               f"or recurrent layers); {spec.name} takes {spec.input.kind} input")
    dense, acts = [], []
    for layer in spec.layers:
        if isinstance(layer, L.Dense) and layer.bias and layer.trainable:
            dense.append(layer)
        elif isinstance(layer, L.Activation):
            acts.append(layer.fn)
        elif isinstance(layer, L.Dropout) and layer.rate == 0:
            continue
        else:
            raise UnsupportedError(f"h2o deep learning builds multilayer perceptrons only; it has no {layer.kind} layer")
    if len(acts) != len(dense) - 1 or len(set(acts)) > 1 or not dense:
        raise UnsupportedError("h2o deep learning uses one activation after every hidden layer and none after the output")
    if any(not isinstance(a, L.Dense) for a in spec.layers[-1:]):
        raise UnsupportedError("h2o deep learning's output layer is a softmax over a dense layer")
    return Plan(dense, [d.units for d in dense[:-1]], acts[0] if acts else "tanh")


def to_h2o(plan: Plan, params: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Canonical (W (in, out), b) per layer -> H2O's (W (out, in), b), rescaled for sigmoid."""
    out = []
    for i, d in enumerate(plan.dense):
        w = params[f"{d.name}.weight"].astype(np.float64)
        b = params[f"{d.name}.bias"].astype(np.float64)
        if plan.activation == "sigmoid":
            prev_sigmoid = i > 0
            last = i == len(plan.dense) - 1
            if prev_sigmoid:  # input is (1 + t) / 2
                b = b + w.sum(axis=0) / 2
                w = w / 2
            if not last:  # the layer's own sigmoid as tanh(z / 2)
                w, b = w / 2, b / 2
        out.append((w.T, b))
    return out


def from_h2o(plan: Plan, layers: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Inverse of :func:`to_h2o`: the canonical parameters a model's H2O weights stand for."""
    params = {}
    for i, (d, (wt, b)) in enumerate(zip(plan.dense, layers, strict=True)):
        w, b = wt.T.astype(np.float64), b.astype(np.float64)
        if plan.activation == "sigmoid":
            if i != len(plan.dense) - 1:
                w, b = w * 2, b * 2
            if i > 0:
                w = w * 2
                b = b - w.sum(axis=0) / 2
        params[f"{d.name}.weight"], params[f"{d.name}.bias"] = w.astype(np.float32), b.astype(np.float32)
    return params


def _upload(x: np.ndarray, labels: list[str] | None = None) -> h2o.H2OFrame:
    """A float32-exact CSV (``%.9g`` round-trips float32) uploaded to the cluster; H2OFrame(list) would
    send Python reprs through a slower path."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    names = [f"x{i}" for i in range(x.shape[1])]
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(",".join(names + (["y"] if labels is not None else [])) + "\n")
        for i, row in enumerate(x):
            f.write(",".join(f"{v:.9g}" for v in row) + (f",{labels[i]}" if labels is not None else "") + "\n")
        path = f.name
    try:
        types = ["real"] * len(names) + (["enum"] if labels is not None else [])
        return h2o.upload_file(path, header=1, col_types=types)
    finally:
        os.unlink(path)


def _labels(y: np.ndarray) -> list[str]:
    return [f"c{int(v):05d}" for v in y]


@dataclass
class H2OModel:
    spec: ModelSpec
    plan: Plan
    weights: list[Any]  # H2OFrames, one per layer (out x in)
    biases: list[Any]
    loaded: Any  # the model holding the canonical weights (rate 0), for predict and the gate
    classes: int
    inputs: list[str]
    last_models: list[Any] = field(default_factory=list)
    reported: list[dict] = field(default_factory=list)


class H2OBackend(Backend):
    declaration = DECLARATION
    packages = ("h2o", "numpy")
    output = "probabilities"
    forward_only_reason = NO_GRADIENT

    def __init__(self) -> None:
        self.threads: int | None = None
        self.cluster: Cluster | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        return {"nthreads": n}

    def _ensure_cluster(self) -> Cluster:
        if self.cluster is None:
            self.cluster = Cluster(self.threads)
        return self.cluster

    def _params(self, plan: Plan, lr: float, momentum: float) -> dict[str, Any]:
        return dict(hidden=plan.hidden, activation=ACTIVATIONS[plan.activation], loss="CrossEntropy",
                    distribution="multinomial", adaptive_rate=False, rate=lr, rate_annealing=0.0, rate_decay=1.0,
                    momentum_start=momentum, momentum_stable=momentum, momentum_ramp=1.0,
                    nesterov_accelerated_gradient=False, l1=0.0, l2=0.0, standardize=False, ignore_const_cols=False,
                    epochs=1, train_samples_per_iteration=-1, score_each_iteration=False, shuffle_training_data=False,
                    mini_batch_size=1, seed=0, variable_importances=False, diagnostics=False, quiet_mode=True,
                    export_weights_and_biases=False)

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> H2OModel:
        variant = variant or "default"
        if variant not in self.variants:
            raise UnsupportedError(f"h2o has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"h2o's deep learning runs in the JVM on the CPU; no device {device!r}")
        plan = plan_of(spec)
        self._ensure_cluster()
        classes, inputs = spec.input.classes, [f"x{i}" for i in range(spec.input.shape[0])]
        layers = to_h2o(plan, weights.params)
        w_frames = [_upload(w) for w, _ in layers]
        b_frames = [_upload(b.reshape(-1, 1)) for _, b in layers]
        # one row per class, so the model's output layer has every class, in canonical order
        seed = _upload(np.zeros((classes, len(inputs))), _labels(np.arange(classes)))
        loaded = H2ODeepLearningEstimator(**{**self._params(plan, 0.0, 0.0), "initial_weights": w_frames,
                                             "initial_biases": b_frames})
        loaded.train(x=inputs, y="y", training_frame=seed)
        h2o.remove(seed)
        return H2OModel(spec, plan, w_frames, b_frames, loaded, classes, inputs)

    def place(self, batch: Batch, model: H2OModel) -> dict[str, Any]:
        n = min(batch.size, samples_cap())
        x, y = batch.x[:n], None if batch.y is None else batch.y[:n]
        present = set() if y is None else {int(v) for v in y}
        frame = _upload(x, None if y is None else _labels(y))
        return {"frame": frame, "all_classes": len(present) == model.classes, "size": n,
                "missing": model.classes - len(present)}

    def call_samples(self, placed: dict[str, Any]) -> int:
        return int(placed["size"])

    def predict(self, model: H2OModel, batch) -> Callable[[], Any]:
        loaded, frame = model.loaded, batch["frame"]

        def run():
            return loaded.predict(frame)
        return run

    def forward(self, model: H2OModel, batch) -> Callable[[], Any]:
        return self.predict(model, batch)

    def epoch(self, model: H2OModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        if opt.name != "sgd":
            raise UnsupportedError(f"h2o's deep learning trains with SGD and momentum or ADADELTA; it has no {opt.name}")
        if not batch["all_classes"]:
            raise UnsupportedError(f"h2o sizes its softmax layer by the classes present in the training frame; this data "
                                   f"set of {batch['size']} samples lacks {batch['missing']} of {model.spec.name}'s "
                                   f"{model.classes} classes, so the canonical output layer cannot be loaded")
        params = {**self._params(model.plan, opt.lr, opt.momentum), "initial_weights": model.weights,
                  "initial_biases": model.biases, "export_weights_and_biases": False}
        frame, inputs = batch["frame"], model.inputs

        def run():
            while model.last_models:  # the previous call's model (H2O keeps every model in the cluster)
                h2o.remove(model.last_models.pop())
            est = H2ODeepLearningEstimator(**params)
            est.train(x=inputs, y="y", training_frame=frame)
            model.last_models.append(est)
            model.reported.append(_training_speed(est))
            return est
        return run

    def gradient(self, model: H2OModel, batch) -> Callable[[], Any]:
        raise UnsupportedError(NO_GRADIENT)

    def train_step(self, model: H2OModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        raise UnsupportedError("h2o trains whole epochs (Hogwild SGD in the JVM), not one batch: see the epoch scenario")

    def sync(self, out: Any) -> None:
        """``train`` and ``predict`` return when H2O's job is done."""

    def to_numpy(self, out: Any) -> np.ndarray:
        cols = [f"c{i:05d}" for i in range(len(out.columns) - 1)]
        table = out.as_data_frame(use_pandas=False, header=True)
        header, rows = table[0], table[1:]
        index = [header.index(c) for c in cols]
        return np.array([[float(r[i]) for i in index] for r in rows], np.float64)

    def param_count(self, model: H2OModel) -> int:
        units = [int(u) for u in model.loaded._model_json["output"]["model_summary"]["units"]]
        return sum(a * b + b for a, b in zip(units[:-1], units[1:], strict=True))

    def get_params(self, model: H2OModel) -> dict[str, np.ndarray]:
        """Read back from H2O: a copy of the loaded model trained (rate 0) with its weights exported as
        frames (exporting is slow for large nets, so the measured models never do it)."""
        seed = _upload(np.zeros((model.classes, len(model.inputs))), _labels(np.arange(model.classes)))
        est = H2ODeepLearningEstimator(**{**self._params(model.plan, 0.0, 0.0), "initial_weights": model.weights,
                                          "initial_biases": model.biases, "export_weights_and_biases": True})
        est.train(x=model.inputs, y="y", training_frame=seed)
        layers = []
        for i in range(len(model.plan.dense)):
            w = np.array(est.weights(i).as_data_frame(use_pandas=False)[1:], np.float64)
            b = np.array(est.biases(i).as_data_frame(use_pandas=False)[1:], np.float64).reshape(-1)
            layers.append((w, b))
        h2o.remove(est)
        h2o.remove(seed)
        return from_h2o(model.plan, layers)

    def loss_and_grads(self, model: H2OModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        raise UnsupportedError(NO_GRADIENT)

    def cell_metrics(self, model: H2OModel) -> dict[str, Any]:
        speeds = [r["training_speed_samples_per_s"] for r in model.reported if r.get("training_speed_samples_per_s")]
        return {"h2o_training_speed_samples_per_s": speeds, "h2o_nthreads": self.cluster.nthreads if self.cluster else None,
                "h2o_training_samples": [r.get("samples") for r in model.reported]} if model.reported else {}

    def info(self) -> dict[str, Any]:
        out = {"h2o": h2o.__version__, "numpy": np.__version__, "java": _java_version(),
               "parallelism": "Hogwild (lock-free asynchronous SGD across threads), mini_batch_size=1"}
        if self.cluster is not None:
            out["nthreads"] = self.cluster.nthreads
            out["cluster"] = self.cluster.name
        return out


def _training_speed(est) -> dict[str, Any]:
    """H2O's own last scoring-history row: its training speed (obs/sec) and samples."""
    try:
        hist = est._model_json["output"]["scoring_history"]
        names = hist.col_header
        row = hist.cell_values[-1]
        get = dict(zip(names, row, strict=False))
        speed = get.get("training_speed")
        return {"training_speed_samples_per_s": float(str(speed).split()[0]) if speed not in (None, "") else None,
                "samples": get.get("samples")}
    except Exception as exc:  # never lose a timing for a report format change
        return {"error": f"{type(exc).__name__}: {exc}"}


def _java_version() -> str | None:
    java = shutil.which("java")
    if not java:
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    return (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else None


Backend_ = H2OBackend
