"""A cell fanned out over Ray nodes sees the run's stored cells as a cell measured in turn does.

The planner's run floor (``adaptive.run_floor``) and LoadGen's harness floor read ``Context.stored``; the
fan-out's task built its Context without it, so under ``--launcher ray`` over two nodes every cell was
planned on its own pilot alone. Ray itself is replaced by a stand-in that runs each task at once."""

from contextlib import contextmanager

from dlbench.core.cell import Cell
from dlbench.running import ray as ray_launch
from dlbench.storage.cell_result import CellOutcome


class _Ref:
    def __init__(self, value):
        self.value = value


class _InlineRay:
    """Ray's calls that ``measure_cells`` makes, each task run when it is sent."""

    class exceptions:
        RayError = RuntimeError

    def remote(self, fn):
        class Task:
            def options(self, **_):
                return self

            def remote(self, *args):
                return _Ref(fn(*args))

        return Task()

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref.value

    def cancel(self, ref):
        pass


class _Recording:
    """A scenario that records the stored cells its Context held."""

    def __init__(self):
        self.seen: list[set[str]] = []

    @contextmanager
    def session(self, *args):
        yield None

    def measure(self, cell, ctx):
        self.seen.append(set(ctx.stored))
        return CellOutcome("ok", metrics={"variance": {"between": 1e-3}})


def test_a_fanned_out_cell_is_sent_the_runs_cells_stored_before_it(monkeypatch):
    scenario = _Recording()
    monkeypatch.setattr("dlbench.scenarios.registry.get", lambda name: scenario)
    monkeypatch.setattr(ray_launch, "_ran_on", lambda: {"node_id": "n1", "hostname": "h"})
    launcher = object.__new__(ray_launch.RayLauncher)
    launcher.ray, launcher.hardware, launcher.peak_nodes, launcher.mixed = _InlineRay(), {"n1": {}, "n2": {}}, {}, None
    launcher.node_cpus, launcher.node_gpus = 1.0, 0.0
    cells = [Cell("torch", "eager", "lenet", "forward", b, 1) for b in (1, 2, 4, 8)]
    stored = {"earlier/cell": {"variance": {"between": 2e-3}}}  # a resumed run's cell
    for cell, outcome in launcher.measure_cells(cells, None, lambda c: None, lambda *a, **k: None, stored):
        stored[cell.key] = outcome.metrics  # as the runner's driver does
    # two nodes: the first two cells are sent before any finishes; each later one sees those before it
    assert scenario.seen == [{"earlier/cell"}, {"earlier/cell"}, {"earlier/cell", cells[0].key},
                             {"earlier/cell", cells[0].key, cells[1].key}]
