"""The scenario layer: a plug-in scenario runs end to end, the orchestration names no scenario, and
the package has no import cycle."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.frameworks import FRAMEWORKS, load_plugins
from dlbench.planning.plan import suite_from_dict
from dlbench.scenarios import registry
from tests.conftest import requires

HERE = Path(__file__).parent
SRC = HERE.parent / "src" / "dlbench"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv("DLBENCH_PLUGINS", f"{HERE / 'fakefw.py'},{HERE / 'toyplugin' / 'toyscenario.py'}")
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


@requires("torch")
def test_a_plugin_scenario_owns_its_settings_flag_and_report_section(toy, tmp_path, capsys):
    """tests/toyplugin/toyscenario.py alone: its settings from a suite file and from its own flag, travelling in
    its job; its section in the report; nothing outside its module names it."""
    suite = tmp_path / "toy.yaml"
    suite.write_text("models: [sae]\nframeworks: [fakefw]\nscenarios: [toy]\nbatch_sizes: [8]\nthreads: [1]\n"
                     "protocol: {repeats: 1, warmup: 0}\ntoy: {calls: 3}\n")
    db = str(tmp_path / "r.db")
    assert main(["run", "--suite", str(suite), "--db", db, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["run", "--suite", str(suite), "--toy-calls", "4", "--db", db, "--json"]) == 0  # the flag wins
    second = json.loads(capsys.readouterr().out)["run_id"]
    from dlbench import api

    assert [c.time_ms.n for c in api.results(first, db).cells] == [3]
    assert [c.time_ms.n for c in api.results(second, db).cells] == [4]
    assert main(["show", second, "--db", db]) == 0 and "toy ms" in capsys.readouterr().out
    assert main(["report", second, "--db", db, "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Toy matrix products" in md and "| 4 |" in md
    assert main(["run", "--suite", str(suite), "--toy-calls", "0", "--db", db]) == 2
    assert "--toy-calls (toy.calls): calls must be >= 1, got 0" in capsys.readouterr().err  # the flag named
    suite.write_text(suite.read_text().replace("calls: 3", "colour: red"))
    assert main(["run", "--suite", str(suite), "--db", db]) == 2
    assert "toy.colour: Extra inputs are not permitted (its settings: calls)" in capsys.readouterr().err


def test_a_stored_cell_of_an_unregistered_scenario_is_still_readable(tmp_path):
    from dlbench.report.results import load_run
    from dlbench.storage.store import Sample, Store

    store = Store(tmp_path / "r.db")
    run = store.create_run("t", {})
    cell = {"framework": "torch", "variant": "eager", "model": "sae", "scenario": "gone", "batch": 4, "threads": 1,
            "device": "cpu", "data": "synthetic", "key": "torch/eager/sae/gone/b4/t1/cpu"}
    store.save_cell(run, cell, "ok", "", 1.0, [], {}, [Sample(0, i, "measure", 1e6) for i in range(5)])
    (res,) = load_run(store, run).cells
    assert res.time_ms.median == pytest.approx(1.0) and res.samples_per_s == pytest.approx(4000.0)


def test_runner_worker_and_results_name_no_scenario():
    names = [s for s in registry.names()]
    for module in ("running/runner.py", "worker.py", "report/results.py"):
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


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto dlbench's packages (``dlbench.report.html`` -> ``report``; a module at
    the root is its own node): two packages that import each other are a cycle even when no two of their
    modules are."""
    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    out: dict[str, set[str]] = {}
    for module, imported in graph.items():
        out.setdefault(package(module), set()).update(package(m) for m in imported)
    return {p: deps - {p} for p, deps in out.items()}


#: a cycle between packages the layers contract still admits as siblings (``a : b`` in pyproject.toml)
#: while #42's framework folders land; delete it with the ``:``.
ADMITTED: set[tuple[str, str]] = set()


def test_the_package_cycle_finder_sees_a_cycle_no_two_modules_make():
    graph = {"dlbench.a.x": {"dlbench.b.y"}, "dlbench.b.y": set(), "dlbench.b.z": {"dlbench.a.w"}, "dlbench.a.w": set()}
    assert find_cycle(graph) is None
    assert find_cycle(package_graph(graph)) == ["a", "b", "a"]


def test_dlbench_has_no_import_cycle_between_packages():
    graph = package_graph(import_graph())
    for a, b in ADMITTED:
        assert b in graph[a] and a in graph[b], f"{a} and {b} no longer import each other: remove them from ADMITTED"
        graph[a].discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def _layers() -> list[set[str]]:
    """The layers contract in pyproject.toml, top first: the packages (and root modules) of each layer."""
    import tomllib

    config = tomllib.loads((HERE.parent / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [{name.strip(" ()") for name in layer.replace(":", "|").split("|")} for layer in contract["layers"]]


def test_the_plugin_scenario_imports_only_what_a_scenario_may():
    """The how-to's scenario is what a contributor copies: it imports nothing above ``scenarios`` in the
    layers (its report section is built from ``core/document.py``, not ``report/``)."""
    layers = _layers()
    (at,) = [i for i, layer in enumerate(layers) if "scenarios" in layer]
    allowed = set().union(*layers[at:])
    imported = {m.split(".")[1] for m in _imports(HERE / "toyplugin" / "toyscenario.py", "toyscenario") if m.count(".")}
    assert imported and imported <= allowed, f"toyscenario imports {sorted(imported - allowed)}"


def test_each_scenario_has_its_own_throughput_column(tmp_path, capsys):
    """The summary's one samples/s column showed torch's train_step rate beside ONNX Runtime's forward
    rate: each scenario's rate now sits in its own column, named after it."""
    from dlbench.storage.store import Store
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


# --- no module outside a scenario's own compares against its name ---------------------------------
#: modules where a scenario's name is also another thing's name, and is compared as that (a backend's
#: closures are named apart: a framework folder's own closures and variants, and a closure compared
#: with a ``closures`` attribute, are not scenario names; see :func:`allowed_in`)
OTHER_MEANINGS = {
    "measure/reuse.py": "torch's 'compile' variant (the one with a compilation cache; measure/ is below the "
                        "framework declarations, so it cannot read them)",
}


def allowed_in(rel: str) -> set[str]:
    """The names a module may compare against as something else than a scenario: in a framework's
    folder, its own variants and the closures (dlbench.frameworks.declaration.CLOSURES)."""
    from dlbench.frameworks.declaration import CLOSURES

    parts = rel.split("/")
    if parts[0] == "frameworks" and len(parts) > 2 and parts[1] in FRAMEWORKS:
        return {*CLOSURES, *FRAMEWORKS[parts[1]].variants}
    return set()


def scenario_name_comparisons(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Comparisons (``==``, ``!=``, ``in``, ``not in``) of anything with a literal scenario name, or a
    literal tuple/list/set of them, and ``.startswith``/``.endswith`` with a literal that begins one."""
    def literal_names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [n for e in node.elts for n in literal_names(e)]
        return []

    from dlbench.frameworks.declaration import CLOSURES

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            # ``"gradient" in backend.closures``: a closure, named as the backend names its closures
            closures = any(isinstance(side, ast.Attribute) and side.attr == "closures" for side in sides)
            for side in sides:
                found += [(node.lineno, n) for n in literal_names(side) if not (closures and n in CLOSURES)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and any(n.startswith(node.args[0].value) for n in names if node.func.attr == "startswith")):
            found.append((node.lineno, node.args[0].value))
    return found


def test_the_name_check_finds_planted_comparisons():
    planted = ast.parse('if c.scenario == "latency": pass\nx = s in ("forward", "gradient")\n'
                        'y = c.scenario.startswith("loadgen-")\nz = c.scenario == other.name\n'
                        'w = "gradient" in backend.closures\n')
    assert [n for _, n in scenario_name_comparisons(planted, set(registry.names()))] == [
        "latency", "forward", "gradient", "loadgen-"]
    assert "compile" in allowed_in("frameworks/torch/backend.py") and "compile" not in allowed_in("gate/verify.py")


def test_no_module_outside_a_scenario_compares_against_a_scenario_name():
    """What a scenario is (its cells, settings, report section, summary column) is asked of the
    registry, never decided elsewhere by its name."""
    names = set(registry.names())
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("scenarios/") or any(rel == k or rel.startswith(k + "/") for k in OTHER_MEANINGS):
            continue
        offenders += [f"{rel}:{line}: {name!r}" for line, name in scenario_name_comparisons(ast.parse(path.read_text()),
                                                                                           names - allowed_in(rel))]
    assert not offenders, "compared against a scenario's name:\n" + "\n".join(offenders)


def test_a_scenario_requires_a_tuple_of_closures_and_the_base_checks_them():
    """``requires`` is the closures a scenario measures: none offered, the cells are unsupported with the
    reason; some offered, ``closures_of`` gives them (compile and layers no longer check closures themselves)."""
    from dlbench.frameworks import framework_info
    from dlbench.scenarios import registry

    compile_, layers, forward = registry.get("compile"), registry.get("layers"), registry.get("forward")
    assert all(isinstance(s.requires, tuple) for s in (compile_, layers, forward)) and forward.requires == ("forward",)
    ort, h2o = framework_info("onnxruntime"), framework_info("h2o")
    assert layers.closures_of(ort) == compile_.closures_of(ort) == ("forward",) and compile_.unsupported(ort) is None
    assert "not forward or gradient or train_step, which compile needs" in compile_.unsupported(h2o)
    assert "unsupported" not in vars(type(compile_)) and "unsupported" not in vars(type(layers))
    old_style = type(forward)("forward", "x", 1.0)
    old_style.requires = "forward"  # one closure's name, as plug-ins wrote it before
    with pytest.raises(TypeError, match="requires must be a tuple"):
        registry.register(old_style)
