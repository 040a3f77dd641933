"""The optimiser as a run setting: one validated model (suite file, flags, API), carried by the cells
that update parameters and their jobs, recorded with each cell, refused where a scenario cannot run it."""

import json

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.core.cell import Cell
from dlbench.core.errors import UsageError
from dlbench.core.job import decode, encode
from dlbench.frameworks.base import ADAMW_LR, OptimizerSpec
from dlbench.planning import flags
from dlbench.planning.plan import OptimizerModel, expand, suite_from_dict
from dlbench.running.runner import gate
from dlbench.scenarios import registry
from tests.conftest import requires


def test_defaults_are_sgd_momentum_and_transformers_adamw():
    assert OptimizerModel().name == "sgd" and OptimizerModel().momentum == 0.9
    adamw = OptimizerSpec.from_settings(OptimizerModel(name="adamw").model_dump(), model_lr=0.01)
    assert (adamw.lr, adamw.betas, adamw.eps, adamw.weight_decay) == (ADAMW_LR, (0.9, 0.999), 1e-8, 0.0)
    assert OptimizerSpec.from_settings(OptimizerModel().model_dump(), model_lr=0.05) == OptimizerSpec(lr=0.05)
    assert OptimizerSpec.from_settings(OptimizerModel(lr=0.2).model_dump(), model_lr=0.05).lr == 0.2
    adamw_1e3 = OptimizerModel(name="adamw", lr=1e-3).model_dump(mode="json")  # as a job carries it
    assert OptimizerSpec.from_settings(adamw_1e3, 0.05, lr=3e-4).lr == 3e-4  # convergence's wins


@pytest.mark.parametrize(("settings", "message"), [
    ({"name": "adam"}, "'sgd' or 'adamw'"),
    ({"name": "adamw", "momentum": 0.5}, "momentum (--momentum) is a setting of optimizer sgd"),
    ({"name": "sgd", "weight_decay": 0.1, "eps": 1e-6}, "are settings of optimizer adamw"),
    ({"name": "adamw", "betas": [0.9, 1.0]}, "each beta must be in [0, 1)"),
    ({"lr": 0}, "greater than 0"),
    ({"name": "adamw", "weight_decay": -1}, "greater than or equal to 0"),
    ({"lr": float("inf")}, "finite number"),
    ({"lr": float("nan")}, "finite number"),
    ({"lr": 1e8}, "less than or equal to 1000"),
    ({"name": "adamw", "eps": 10.0}, "less than or equal to 1"),
    ({"name": "adamw", "weight_decay": 1e9}, "less than or equal to 1000"),
    ({"name": "adamw", "betas": [float("nan"), 0.9]}, "each beta must be in [0, 1)"),
    ({"momentum": 1.0}, "less than 1"),
])
def test_the_suite_model_refuses_bad_settings(settings, message):
    with pytest.raises(UsageError, match="optimizer") as exc:
        suite_from_dict({"models": ["lenet"], "optimizer": settings})
    assert message in str(exc.value)


def _refused(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize(("extra", "needle"), [
    (["--optimizer", "adam"], "'sgd' or 'adamw'"),
    (["--optimizer", "adamw", "--momentum", "0.5"], "--momentum"),
    (["--betas", "0.9"], "--betas takes two numbers"),
    (["--optimizer", "adamw", "--betas", "0.9,x"], "--betas takes two numbers"),
    (["--lr", "-1"], "--lr (optimizer.lr)"),
    (["--lr", "inf"], "--lr (optimizer.lr)"),
    (["--optimizer", "adamw", "--weight-decay", "1e9"], "--weight-decay (optimizer.weight_decay)"),
])
def test_run_flags_are_checked_with_one_line_and_exit_2(tmp_path, capsys, extra, needle):
    _refused(capsys, ["run", "--model", "lenet", "--framework", "torch", "--scenario", "train_step", "--dry-run",
                      *extra, "--db", str(tmp_path / "r.db")], needle)
    assert not (tmp_path / "r.db").exists()


def test_verify_refuses_an_unknown_optimizer(capsys):
    _refused(capsys, ["verify", "--model", "lenet", "--framework", "torch", "--optimizer", "adam"],
             "unknown optimizer(s) adam")


def test_flags_switching_optimizer_start_from_its_defaults():
    """A suite's AdamW settings do not follow a switch to SGD (they would be refused as foreign)."""
    base = suite_from_dict({"models": ["lenet"], "optimizer": {"name": "adamw", "weight_decay": 0.1}})
    assert flags.build_suite(base, optimizer={"name": "sgd"}).optimizer == OptimizerModel()
    kept = flags.build_suite(base, optimizer={"lr": 1e-3}).optimizer
    assert (kept.name, kept.weight_decay, kept.lr) == ("adamw", 0.1, 1e-3)


def test_only_cells_that_update_carry_the_optimizer_and_their_keys_say_so():
    suite = suite_from_dict({"models": ["lenet"], "frameworks": ["torch"], "threads": [1],
                             "scenarios": ["forward", "gradient", "train_step", "compile"],
                             "optimizer": {"name": "adamw"}})
    cells = expand(suite, ["torch"], lambda fw, v: ["eager"], lambda m, s, d: 8)
    by = {c.scenario: c for c in cells}
    assert {s: c.optimizer for s, c in by.items()} == {"forward": "sgd", "gradient": "sgd", "train_step": "adamw",
                                                        "compile": "adamw"}
    assert by["train_step"].key == "torch/eager/lenet/train_step/b8/t1/cpu/adamw"
    assert Cell("torch", "eager", "lenet", "train_step", 8, 1).key == "torch/eager/lenet/train_step/b8/t1/cpu"
    job = registry.get("train_step").job(by["train_step"], suite)
    assert job.cell.optimizer == "adamw" and job.optimizer == suite.optimizer.model_dump(mode="json")
    assert decode(json.loads(json.dumps(encode(job)))).optimizer["name"] == "adamw"  # through the worker's file
    assert registry.get("forward").job(by["forward"], suite).optimizer is None


def test_a_scenario_without_adamw_makes_its_cells_unsupported_with_the_reason():
    cell = Cell("torch", "eager", "lenet", "scaling", 8, 1, optimizer="adamw")
    outcome = gate(cell, {"verdict": "pass"})
    assert outcome.status == "unsupported" and "SGD momentum" in outcome.reason
    assert gate(Cell("torch", "eager", "lenet", "scaling", 8, 1), {"verdict": "pass"}) is None


@requires("torch")
def test_an_adamw_run_records_its_optimizer_and_gates_its_update(tmp_db):
    res = api.run(models=["lenet"], frameworks=["torch"], scenarios=["forward", "train_step"], batches=[8],
                  threads=[1], optimizer={"name": "adamw", "weight_decay": 0.01}, db=tmp_db,
                  protocol={"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1, "timeout_s": 120})
    cells = {c.cell.scenario: c for c in res.cells}
    assert cells["train_step"].cell.key.endswith("/adamw") and cells["train_step"].cell.status == "ok"
    assert cells["train_step"].cell.metrics["optimizer"] == {"name": "adamw", "lr": ADAMW_LR, "betas": [0.9, 0.999],
                                                              "eps": 1e-8, "weight_decay": 0.01}
    assert "optimizer" not in cells["forward"].cell.metrics
    verdict = next(iter(res.verifications.values()))
    assert set(verdict["update"]) == {"adamw"} and verdict["update_error"] <= 1e-3
