"""OpenVINO's own settings: the fp32 gate needs f32 inference (its CPU default may be bf16), the cell's
thread count reaches the compiled model, and one graph per static input shape."""

import numpy as np
import pytest

from dlbench.data.synthetic import make_batch
from dlbench.frameworks import UnsupportedError, get_backend
from dlbench.models import get_model
from dlbench.weights import init_weights
from tests.conftest import requires

pytestmark = [requires("openvino"), requires("onnxruntime"), requires("onnx"), requires("onnxscript"),
              requires("torch")]


def test_openvino_runs_f32_on_the_cells_threads_with_a_graph_per_shape():
    backend = get_backend("openvino")
    backend.set_threads(1)
    spec = get_model("lenet")
    model = backend.build(spec, init_weights(spec, 0))
    outs = {}
    for size in (1, 4):
        placed = backend.place(make_batch(spec, size, 0), model)
        outs[size] = backend.to_numpy(backend.forward(model, placed)())
    assert model.build_info["inference_num_threads"] == 1
    assert model.build_info["inference_precision"] in ("f32", "<Type: 'float32'>")
    assert len(model.compiled) == 2 and outs[1].shape[0] == 1 and outs[4].shape[0] == 4
    assert np.allclose(outs[4][:1], backend.to_numpy(backend.forward(model, backend.place(
        make_batch(spec, 4, 0), model))())[:1])


def test_openvino_is_forward_only_and_cpu_only():
    backend = get_backend("openvino")
    spec = get_model("lenet")
    with pytest.raises(UnsupportedError, match="Intel GPUs"):
        backend.build(spec, init_weights(spec, 0), "cuda")
    model = backend.build(spec, init_weights(spec, 0))
    with pytest.raises(UnsupportedError, match="inference engine"):
        backend.gradient(model, backend.place(make_batch(spec, 2, 0), model))
