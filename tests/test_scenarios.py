"""The scenario layer: a plug-in scenario runs end to end, the orchestration names no scenario, and
the package has no import cycle."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.frameworks import FRAMEWORKS, load_plugins
from dlbench.plan import suite_from_dict
from dlbench.scenarios import registry
from tests.conftest import requires

HERE = Path(__file__).parent
SRC = HERE.parent / "src" / "dlbench"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv("DLBENCH_PLUGINS", f"{HERE / 'fakefw.py'},{HERE / 'toyscenario.py'}")
    load_plugins()
    registry.load_plugins()
    yield registry.get("toy")
    registry.SCENARIOS.pop("toy", None)
    FRAMEWORKS.pop("fakefw", None)


def test_a_plugin_scenario_is_planned_like_a_builtin_one(toy):
    suite = suite_from_dict({"models": ["sae"], "scenarios": ["toy", "forward"], "threads": [1]})
    assert suite.scenarios == ["toy", "forward"]
    with pytest.raises(Exception, match="unknown scenario"):
        suite_from_dict({"models": ["sae"], "scenarios": ["toy2"]})


@requires("torch")
def test_a_plugin_scenario_runs_end_to_end_through_dlbench_run(toy, tmp_db, capsys):
    code = main(["run", "--scenario", "toy", "--framework", "fakefw", "--model", "sae", "--batch", "16",
                 "--threads", "1", "--repeats", "1", "--min-iters", "5", "--warmup", "0", "--db", str(tmp_db),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["failed"]
    (row,) = out["models"]["sae"]
    assert row["statuses"] == {"toy": "ok"} and row["verified"] == "pass"
    assert row["toy_samples_per_s"] > 0  # the generic per-call analysis: 16 samples per call
    from dlbench import api

    (cell,) = api.results(out["run_id"], tmp_db).cells
    assert cell.time_ms.n == 5 and cell.cell.metrics["worker_pid"] != os.getpid()  # measured in a worker
    assert main(["show", out["run_id"], "--db", str(tmp_db)]) == 0
    assert "toy ms" in capsys.readouterr().out


def test_a_stored_cell_of_an_unregistered_scenario_is_still_readable(tmp_path):
    from dlbench.results import load_run
    from dlbench.store import Sample, Store

    store = Store(tmp_path / "r.db")
    run = store.create_run("t", {})
    cell = {"framework": "torch", "variant": "eager", "model": "sae", "scenario": "gone", "batch": 4, "threads": 1,
            "device": "cpu", "data": "synthetic", "key": "torch/eager/sae/gone/b4/t1/cpu"}
    store.save_cell(run, cell, "ok", "", 1.0, [], {}, [Sample(0, i, "measure", 1e6) for i in range(5)])
    (res,) = load_run(store, run).cells
    assert res.time_ms.median == pytest.approx(1.0) and res.samples_per_s == pytest.approx(4000.0)


def test_runner_worker_and_results_name_no_scenario():
    names = [s for s in registry.names()]
    for module in ("runner.py", "worker.py", "results.py"):
        text = (SRC / module).read_text()
        for name in names:
            assert f'"{name}"' not in text and f"'{name}'" not in text, f"{module} names the {name} scenario"


def _imports(path: Path, module: str) -> set[str]:
    """Modules of dlbench ``module`` imports, at module level, in functions or for annotations only
    (``if TYPE_CHECKING:``: a cycle there is still two modules that each need the other to be read)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        out |= {t for t in targets if t.startswith("dlbench.")}
    return out


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path, name) if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_dlbench_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_each_scenario_has_its_own_throughput_column(tmp_path, capsys):
    """The summary's one samples/s column showed torch's train_step rate beside ONNX Runtime's forward
    rate: each scenario's rate now sits in its own column, named after it."""
    from dlbench.store import Store
    from tests.synthetic_runs import cell, metrics, new_run, timed_samples

    db = tmp_path / "r.db"
    store = Store(db)
    run = new_run(store)
    for fw, variant, scenario, ms in (("torch", "eager", "forward", 2.0), ("torch", "eager", "train_step", 8.0),
                                      ("onnxruntime", "default", "forward", 1.0)):
        store.save_cell(run, {**cell(fw, variant, scenario, 64, 1), "data": "synthetic"}, "ok", "", 1.0, [],
                        metrics(), timed_samples(ms))
    store.save_cell(run, {**cell("onnxruntime", "default", "train_step", 64, 1), "data": "synthetic"},
                    "unsupported", "inference only", 0.0, [], {}, [])
    store.finish_run(run, "complete")
    store.close()
    assert main(["show", run, "--db", str(db), "--json"]) == 0
    rows = {r["framework"]: r for r in json.loads(capsys.readouterr().out)["models"]["lenet"]}
    assert rows["torch"]["train_step_samples_per_s"] == pytest.approx(64 / 8e-3, rel=0.05)
    assert rows["torch"]["forward_samples_per_s"] == pytest.approx(64 / 2e-3, rel=0.05)
    assert rows["onnxruntime"]["forward_samples_per_s"] == pytest.approx(64 / 1e-3, rel=0.05)
    assert rows["onnxruntime"]["train_step_samples_per_s"] is None and "samples_per_s" not in rows["torch"]
    assert main(["show", run, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "forward samples/s" in text and "train_step samples/s" in text


def test_run_s_scenario_help_lists_every_registered_scenario(capsys, monkeypatch):
    """Regression: ``--scenario``'s help named 5 of the scenarios; it is read from the registry."""
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside a name
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out.split("--scenario SCENARIO")[-1].split("--batch BATCH")[0]
    assert set(registry.names()) <= {n.strip(" ,") for n in text.split(":", 1)[1].split("(")[0].split()}
