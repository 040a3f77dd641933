"""The ``layers`` scenario: where a model's time goes, part by part, in every framework.

A cell of model M becomes the timed cells of M's parts (:mod:`dlbench.models.split`: each layer
with its activation and pooling, each residual block, the LSTM as one recurrent layer), each part a
model ``M#k`` of its own, fed a tensor of the shape it sees in M: ``forward`` and, where the
framework trains, ``gradient`` (forward + backward). The whole model's own ``forward`` and
``gradient`` cells come with them, so the report can set the sum of the parts beside the whole:
what fusion across layers saves, or per-call overhead adds. Every part is built by the backend's own
builders and passes the equivalence gate like any model; its cells are ordinary timed cells (fresh
processes, the standard protocol), so nothing here runs in a measuring process.

The breakdown is read by :mod:`dlbench.scenarios.layers_report` (the table) and ``dlbench explain`` (which
parts account for a gap between two frameworks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dlbench.frameworks import framework_info
from dlbench.models import get_model
from dlbench.models.split import part_ref, split
from dlbench.scenarios.base import CellOutcome, Context, Scenario, SuiteView

if TYPE_CHECKING:
    from dlbench.core.cell import Cell

#: what each part (and the whole model) is timed in, where the framework has it
TIMED = ("forward", "gradient")


class Layers(Scenario):
    name = "layers"
    description = "each part of the model (a layer, a residual block, the LSTM) timed forward and forward+backward"
    requires = TIMED
    in_summary = False

    def cells(self, cell: Cell, suite: SuiteView) -> list[Cell]:
        parts = split(get_model(cell.model))
        out = []
        for scenario in self.closures_of(framework_info(cell.framework)):
            out.append(replace(cell, scenario=scenario))
            out += [replace(cell, model=part_ref(cell.model, p.index), scenario=scenario) for p in parts]
        return out

    def measure(self, cell: Cell, ctx: Context) -> CellOutcome:
        return CellOutcome("unsupported", "a layers cell is planned as its parts' forward and gradient cells")

    def cells_of(self, res) -> list:
        """A layers cell is stored as its parts' forward and gradient cells: every cell of a part."""
        from dlbench.models.split import parse_part

        return [c for c in res.cells if parse_part(c.cell.model)[1] is not None]

    def report_sections(self, res) -> list:
        from dlbench.scenarios.layers_report import section

        return [section(res)] if self.cells_of(res) else []



SCENARIOS = (Layers(),)
