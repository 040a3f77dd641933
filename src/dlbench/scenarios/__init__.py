"""What is measured: one module per scenario, each a :class:`~dlbench.scenarios.base.Scenario`.

* :mod:`~dlbench.scenarios.timed`: ``forward``, ``gradient``, ``train_step`` (one batch, timed
  under the protocol) and the whole-data-set ``epoch`` and ``predict`` (H2O);
* :mod:`~dlbench.scenarios.compile`: first-call times in fresh processes, caches cold then warm;
* :mod:`~dlbench.scenarios.convergence`: E epochs on a real data set, curves and agreement;
* :mod:`~dlbench.scenarios.scaling`: data-parallel training at W workers (:mod:`dlbench.distributed`).

:mod:`~dlbench.scenarios.base` holds the contract, :mod:`~dlbench.scenarios.registry` the names
(plug-ins included), :mod:`~dlbench.scenarios.prepare` what every measuring process does first.
This package module imports nothing, so importing one scenario never imports the others.
"""
