"""ONNX Runtime backend specifics: export, session options, dynamic axes, forward-only gate."""

import numpy as np
import pytest

from tests.conftest import requires

pytestmark = [requires("onnxruntime"), requires("onnx"), requires("onnxscript"), requires("torch")]

THREADS = 2


@pytest.fixture(scope="module")
def backend():
    from dlbench.frameworks import get_backend

    b = get_backend("onnxruntime")
    assert b.set_threads(THREADS) == {"intra_op": THREADS, "inter_op": 1}
    return b


@pytest.fixture(scope="module")
def torch_backend():
    from dlbench.frameworks.torch.backend import TorchBackend

    return TorchBackend()


def _built(backend, name):
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model(name)
    weights = init_weights(spec, 0, mode="verify")
    return spec, weights, backend.build(spec, weights)


@pytest.fixture(scope="module")
def lenet(backend):
    return _built(backend, "lenet")


@pytest.fixture(scope="module")
def lstm(backend):
    return _built(backend, "lstm-imdb")


def _forward(backend, model, batch):
    out = backend.forward(model, backend.place(batch, model))()
    backend.sync(out)
    return backend.to_numpy(out)


def test_registry_matches_backend(backend):
    from dlbench.frameworks import FRAMEWORKS

    info = FRAMEWORKS["onnxruntime"]
    assert info.closures == backend.closures == ("forward",)
    assert info.variants == backend.variants


def test_exporter_and_opset_recorded(backend, lenet):
    _, _, model = lenet
    assert model.build_info["exporter"] == "dynamo"
    assert model.build_info["exporter_fallback"] is None
    assert model.build_info["opset"] >= 17
    recorded = [e for e in backend.info()["exports"] if e["model"] == "lenet"]
    assert recorded and recorded[0]["exporter"] == "dynamo" and recorded[0]["opset"] == model.build_info["opset"]


def test_session_options_applied(lenet):
    import onnxruntime as ort

    _, _, model = lenet
    so = model.session.get_session_options()
    assert so.intra_op_num_threads == THREADS
    assert so.inter_op_num_threads == 1
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert model.session.get_providers() == ["CPUExecutionProvider"]
    assert model.build_info["intra_op_threads"] == THREADS


@pytest.mark.parametrize("which", ["lenet", "lstm"])
def test_forward_matches_torch_eager_at_two_batch_sizes(backend, torch_backend, lenet, lstm, which):
    from dlbench.data import make_batch

    spec, weights, model = {"lenet": lenet, "lstm": lstm}[which]
    eager = torch_backend.build(spec, weights)
    shapes = []
    for size in (1, 9):
        batch = make_batch(spec, size, seed=1)
        shapes.append(batch.x.shape)
        ours = _forward(backend, model, batch)
        theirs = torch_backend.to_numpy(torch_backend.forward(eager, torch_backend.place(batch, eager))())
        assert ours.shape == theirs.shape == (size, *spec.output_shape)
        assert np.linalg.norm(ours - theirs) <= 1e-5 * np.linalg.norm(theirs)
    if which == "lstm":  # the sequence axis is dynamic too: the two batches are padded to different lengths
        assert shapes[0][1] != shapes[1][1]
        assert [i.name for i in model.session.get_inputs()] == ["x", "mask"]


def test_params_read_back_from_exported_graph(backend, lenet, lstm):
    for spec, weights, model in (lenet, lstm):
        extra, _ = backend.param_count_extra(spec)
        assert backend.param_count(model) == spec.param_count + extra
        params = backend.get_params(model)
        assert params.keys() == weights.params.keys()
        for name, value in weights.params.items():
            np.testing.assert_array_equal(params[name], value, err_msg=name)
    assert backend.param_count_extra(lstm[0])[0] == 4 * 128


def test_training_scenarios_are_unsupported_with_reason(backend, lenet):
    from dlbench.data import make_batch
    from dlbench.frameworks import OptimizerSpec, UnsupportedError

    spec, _, model = lenet
    placed = backend.place(make_batch(spec, 2), model)
    for call in (lambda: backend.gradient(model, placed), lambda: backend.train_step(model, placed, OptimizerSpec()),
                 lambda: backend.loss_and_grads(model, placed)):
        with pytest.raises(UnsupportedError, match="onnxruntime is an inference engine here: .*eval-mode forward only"):
            call()


def test_falls_back_to_torchscript_exporter(backend, monkeypatch, lenet):
    from dlbench.data import make_batch
    from dlbench.frameworks.onnxruntime import backend as ortb

    def broken(module, spec):
        raise RuntimeError("planted export failure")

    monkeypatch.setitem(ortb.EXPORT_FUNCTIONS, "dynamo", broken)
    spec, weights, dynamo_model = lenet
    model = backend.build(spec, weights)
    assert model.build_info["exporter"] == "torchscript"
    assert "dynamo: RuntimeError: planted export failure" in model.build_info["exporter_fallback"]
    batch = make_batch(spec, 4)
    np.testing.assert_allclose(_forward(backend, model, batch), _forward(backend, dynamo_model, batch), rtol=1e-5,
                               atol=1e-6)
    assert backend.param_count(model) == spec.param_count


def test_no_exporter_is_unsupported_with_both_reasons(backend, monkeypatch, lenet):
    from dlbench.frameworks import UnsupportedError
    from dlbench.frameworks.onnxruntime import backend as ortb

    def broken(module, spec):
        raise RuntimeError("planted")

    for name in ("dynamo", "torchscript"):
        monkeypatch.setitem(ortb.EXPORT_FUNCTIONS, name, broken)
    spec, weights, _ = lenet
    with pytest.raises(UnsupportedError, match="dynamo: RuntimeError: planted; torchscript: RuntimeError: planted"):
        backend.build(spec, weights)


def test_optimized_graph_cache_is_reused(backend, monkeypatch, tmp_path, lenet):
    from dlbench.data import make_batch
    from dlbench.frameworks.onnxruntime import backend as ortb

    spec, _, model = lenet
    exported = ortb.export_torchscript(ortb.ForwardOnly(_torch_net(spec, lenet[1])).eval(), spec)
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    cold, first = backend._session(exported.onnx_bytes, ["CPUExecutionProvider"])
    warm, second = backend._session(exported.onnx_bytes, ["CPUExecutionProvider"])
    assert (first, second) == ("miss", "hit")
    assert len(list((tmp_path / "onnxruntime").glob("*.onnx"))) == 1
    x = make_batch(spec, 4).x
    np.testing.assert_allclose(warm.run(None, {"x": x})[0], cold.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


def _torch_net(spec, weights):
    from dlbench.frameworks.torch.backend import TorchBackend

    return TorchBackend().build(spec, weights).net


def test_gate_is_forward_only_and_still_catches_a_wrong_forward(backend):
    from dlbench.frameworks.onnxruntime import backend as ortb
    from dlbench.gate.verify import verify_model

    fast = type("TorchScriptOnly", (ortb.OnnxRuntimeBackend,), {"exporters": ("torchscript",)})()
    good = verify_model(fast, "lenet")
    assert good.verdict == "pass", good.reason
    assert good.gradient_error is None and good.loss is None and "forward only" in good.reason
    assert good.build["exporter"] == "torchscript"

    negated = type("Negated", (type(fast),), {"to_numpy": lambda self, out: -np.asarray(out.numpy())})()
    bad = verify_model(negated, "lenet")
    assert bad.verdict == "fail" and "forward error" in bad.reason and "forward only" in bad.reason


def test_export_cache_is_keyed_on_graph_and_weights(backend, monkeypatch, tmp_path, lenet):
    """A run's timed cells reuse one export per (graph, weights); other weights export afresh,
    and without DLBENCH_EXPORT_CACHE nothing is cached."""
    from dlbench.data import make_batch
    from dlbench.frameworks.onnxruntime import backend as ortb
    from dlbench.models.weights import init_weights

    spec, weights, _ = lenet
    calls = []
    real = ortb.EXPORT_FUNCTIONS["torchscript"]
    monkeypatch.setitem(ortb.EXPORT_FUNCTIONS, "torchscript", lambda m, s: calls.append(1) or real(m, s))
    net = ortb.ForwardOnly(_torch_net(spec, weights)).eval()
    monkeypatch.delenv("DLBENCH_EXPORT_CACHE", raising=False)
    assert ortb.export_cached("torchscript", net, spec, weights)[1] == "off"
    monkeypatch.setenv("DLBENCH_EXPORT_CACHE", str(tmp_path))
    first, how1 = ortb.export_cached("torchscript", net, spec, weights)
    again, how2 = ortb.export_cached("torchscript", net, spec, weights)
    assert (how1, how2) == ("miss", "hit") and len(calls) == 2 and again.onnx_bytes == first.onnx_bytes
    other = init_weights(spec, 1, mode="verify")
    _, how3 = ortb.export_cached("torchscript", ortb.ForwardOnly(_torch_net(spec, other)).eval(), spec, other)
    assert how3 == "miss" and len(calls) == 3
    monkeypatch.setattr(backend, "exporters", ("torchscript",))
    model = backend.build(spec, weights)  # through build: a hit, and the graph still computes the function
    assert model.build_info["export_cache"] == "hit"
    x = make_batch(spec, 4)
    np.testing.assert_allclose(_forward(backend, model, x), _forward(backend, lenet[2], x), rtol=1e-5, atol=1e-5)
