"""Planning a run: from flags, a suite file or the Python API's arguments to a validated
suite (:mod:`~dlbench.planning.suite`, :mod:`~dlbench.planning.flags`,
:mod:`~dlbench.planning.resolve`) and its cells (:mod:`~dlbench.planning.plan`), with a guess
at their time (:mod:`~dlbench.planning.estimate`).
"""
