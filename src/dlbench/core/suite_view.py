"""What a scenario, or an engine it drives (``distributed/scaling.py``), reads of a suite.

A protocol, and down here, so that neither imports the suite model (:class:`dlbench.planning.suite.Suite`:
it asks the scenario registry to validate each scenario's settings) nor ``scenarios/`` for an annotation.
"""

from __future__ import annotations

from typing import Any, Protocol


class SuiteView(Protocol):
    """What a scenario reads of a suite (:class:`dlbench.planning.suite.Suite`). A protocol, so that the
    scenarios import no suite model: the suite model asks their registry to validate their settings."""

    protocol: Any  # dlbench.planning.suite.ProtocolModel
    optimizer: Any  # dlbench.planning.suite.OptimizerModel
    seed: int
    #: the batch sizes named ("default": each scenario's default batch; a dict: per model)
    batch_sizes: Any
    data_dir: str | None

    def settings(self, section: str) -> Any:
        """A scenario's settings, by its section (:attr:`Scenario.section`)."""
        ...
