"""The builder base (frameworks/builder.py): the walk over a spec and the dispatch to a backend's
``make_<kind>`` live once; a backend writes only its layers."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.builder import LayerBuilder
from dlbench.models import layers as L

FRAMEWORKS = Path(__file__).parent.parent / "src" / "dlbench" / "frameworks"
#: the backends whose Builder walks the spec (pytensor composes symbolic graphs its own way)
BUILDERS = ("torch", "jax", "keras_model", "mxnet", "paddle", "chainer")


@dataclass(frozen=True)
class Doubling(L.Layer):
    """A layer kind added outside the spec module, as docs/architecture.md's how-to adds one."""

    def out_shape(self, shape):
        return shape


class Recording(LayerBuilder):
    builds_for = "the recording builder"

    def make_dense(self, layer, shape):
        return f"dense {layer.units} from {shape}"

    def make_activation(self, layer, shape):
        return [f"{layer.fn} on {shape}", "and a note"]  # a rule may make several objects


def test_the_walk_passes_each_layer_its_input_shape_and_names_a_missing_rule():
    made, shape = Recording().sequence((L.Dense("fc1", 4), L.Activation("relu"), L.Dense("fc2", 2)), (8,))
    assert made == ["dense 4 from (8,)", "relu on (4,)", "and a note", "dense 2 from (4,)"] and shape == (2,)
    assert Recording.kinds() == {"dense", "activation"}
    with pytest.raises(UnsupportedError, match="the recording builder has no rule for layer Flatten"):
        Recording().sequence((L.Flatten(),), (3, 2, 2))


def test_a_new_layer_kind_is_one_rule_per_builder():
    class WithDoubling(Recording):
        def make_doubling(self, layer, shape):
            return "doubled"

    assert WithDoubling().sequence((Doubling(), L.Dense("fc", 3)), (5,))[0] == ["doubled", "dense 3 from (5,)"]
    assert "doubling" in WithDoubling.kinds() and "doubling" not in Recording.kinds()


@pytest.mark.parametrize("module", BUILDERS)
def test_each_builder_writes_only_its_layers(module):
    """Read without importing (mxnet, chainer and paddle live in their own environments): the Builder
    subclasses LayerBuilder and defines neither the walk nor the dispatch."""
    tree = ast.parse((FRAMEWORKS / f"{module}.py").read_text())
    (builder,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Builder"]
    assert [ast.unparse(b) for b in builder.bases] == ["LayerBuilder"]
    methods = {n.name for n in builder.body if isinstance(n, ast.FunctionDef)}
    assert "layer" not in methods
    assert 'f"make_' not in ast.unparse(builder)  # no dispatch of its own
    if "sequence" in methods:  # only to wrap the walk's result (Flax's Seq)
        assert "super().sequence" in ast.unparse(builder)
    assert {m.removeprefix("make_") for m in methods if m.startswith("make_")} >= {"conv2d", "dense", "residual"}


# --- FrameworkInfo from the backend's own declarations ---------------------------------------------------
@pytest.mark.parametrize("name, module", [("torch", "torch"), ("onnxruntime", "onnxruntime"), ("keras", "keras")])
def test_the_registry_reads_what_the_backend_class_declares(name, module):
    """One place: the registry's variants, devices and scenarios are the imported backend class's."""
    pytest.importorskip(module)
    from dlbench.frameworks import framework_info, get_backend

    backend, info = get_backend(name), framework_info(name)
    assert (info.variants, info.devices, info.scenarios) == (backend.variants, backend.devices, backend.scenarios)


def test_declarations_are_read_through_bases_imports_and_multi_line_tuples(tmp_path, monkeypatch):
    from dlbench.frameworks.declared import declared

    (tmp_path / "planted_engine.py").write_text(
        "from dlbench.frameworks.base import Backend\n\n\n"
        "class Engine(Backend):\n    scenarios: tuple[str, ...] = ('forward',)\n    devices = ('cpu', 'cuda')\n")
    (tmp_path / "planted_fw.py").write_text(
        "from planted_engine import (  # noqa (a comment with parentheses)\n    Engine,\n)\n\n\n"
        "class Planted(Engine):\n    name = 'planted'\n    variants = (\n        'a',\n        'b',\n    )\n"
        "    devices = DEVICES  # computed: not read\n\n    def scenarios_of(self):\n        scenarios = ('x',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # the engine is not dlbench's: its declarations are not followed, Backend's defaults are not either
    assert declared("planted_fw", "planted") == {"variants": ("a", "b")}
    (tmp_path / "planted_fw2.py").write_text(
        "from dlbench.frameworks.onnx_export import ExportEngine\n\n\nclass P(ExportEngine):\n    name = 'p2'\n")
    assert declared("planted_fw2", "p2") == {"variants": ("default",), "devices": ("cpu",), "scenarios": ("forward",)}
    with pytest.raises(LookupError, match="no backend class named 'other'"):
        declared("planted_fw2", "other")
