"""The builder base (frameworks/builder.py): the walk over a spec and the dispatch to a backend's
``make_<kind>`` live once; a backend writes only its layers."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlbench.frameworks.base import OPTIMIZERS, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import OPTIMIZER_RULE, LayerBuilder, make_optimizer
from dlbench.models import layers as L

FRAMEWORKS = Path(__file__).parent.parent / "src" / "dlbench" / "frameworks"
#: the backends whose Builder walks the spec (pytensor composes symbolic graphs its own way)
BUILDERS = ("torch", "jax", "keras/keras_model", "mxnet", "paddle", "chainer")


def source_of(module: str) -> str:
    """A framework folder's backend (``torch``) or another of its modules (``keras/keras_model``), unimported."""
    return (FRAMEWORKS / (f"{module}.py" if "/" in module else f"{module}/backend.py")).read_text()


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
    tree = ast.parse(source_of(module))
    (builder,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Builder"]
    assert [ast.unparse(b) for b in builder.bases] == ["LayerBuilder"]
    methods = {n.name for n in builder.body if isinstance(n, ast.FunctionDef)}
    assert "layer" not in methods
    assert 'f"make_' not in ast.unparse(builder)  # no dispatch of its own
    if "sequence" in methods:  # only to wrap the walk's result (Flax's Seq)
        assert "super().sequence" in ast.unparse(builder)
    assert {m.removeprefix("make_") for m in methods if m.startswith("make_")} >= {"conv2d", "dense", "residual"}


# --- the optimisers, in the same pattern -----------------------------------------------------------------
#: the backends that train, by folder (keras_model's builder trains through keras/backend.py)
TRAINERS = ("torch", "jax", "keras", "tensorflow", "mxnet", "paddle", "chainer", "pytensor")


def test_an_optimizer_is_one_rule_and_a_missing_one_is_named():
    class Owner:
        name = "owner"

        @staticmethod
        def optimizer_sgd(opt, params):
            return ("sgd", opt.lr, params)

    assert make_optimizer(Owner, OptimizerSpec(lr=0.5), ["p"]) == ("sgd", 0.5, ["p"])
    with pytest.raises(UnsupportedError, match=r"owner has no optimiser 'adamw' in dlbench \(it has sgd\)"):
        make_optimizer(Owner, OptimizerSpec(name="adamw"))


@pytest.mark.parametrize("module", TRAINERS)
def test_each_training_backend_writes_a_rule_per_optimizer_and_no_dispatch(module):
    """Read without importing: the backend class names ``optimizer_<name>`` for every optimiser, and no
    module compares ``opt.name`` itself (the dispatch and its error are make_optimizer's)."""
    source = source_of(module)
    tree = ast.parse(source)
    backend = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Backend"))
    names = {t.id for n in backend.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    names |= {n.name for n in backend.body if isinstance(n, ast.FunctionDef)}
    assert {OPTIMIZER_RULE + o for o in OPTIMIZERS} <= names
    assert "opt.name ==" not in source and "opt.name !=" not in source


# --- FrameworkInfo and the backend class from the folder's declaration ---------------------------------------------------
@pytest.mark.parametrize("name, module", [("torch", "torch"), ("onnxruntime", "onnxruntime"), ("keras", "keras")])
def test_the_registry_reads_what_the_backend_class_declares(name, module):
    """One place: the registry's variants, devices and closures are the imported backend class's."""
    pytest.importorskip(module)
    from dlbench.frameworks import framework_info, get_backend

    backend, info = get_backend(name), framework_info(name)
    assert (info.variants, info.devices, info.closures) == (backend.variants, backend.devices, backend.closures)


def test_a_backend_class_takes_what_it_offers_from_its_declaration():
    """One source: a backend class that sets ``declaration`` has the declaration's name, variants,
    devices, closures and precisions, and a subclass keeps them."""
    from dlbench.frameworks.base import Backend
    from dlbench.frameworks.declaration import Declaration

    d = Declaration(name="planted", distribution="x", import_name="x", description="a planted framework",
                    variants=("a", "b"), devices=("cpu", "cuda"), closures=("forward",), precisions=("fp32", "bf16"))

    class Planted(Backend):
        declaration = d

    class Sub(Planted):
        pass

    for cls in (Planted, Sub):
        assert (cls.name, cls.variants, cls.devices, cls.closures, cls.precisions) == (
            "planted", ("a", "b"), ("cpu", "cuda"), ("forward",), ("fp32", "bf16"))
    with pytest.raises(ValueError, match="closures must be among"):
        Declaration(name="bad", distribution="x", import_name="x", description="", closures=("fly",))
