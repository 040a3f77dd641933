"""Running a planned suite: the gate, then each cell by its scenario, stored as it finishes
(:mod:`~dlbench.running.runner`), and on a Ray cluster (:mod:`~dlbench.running.ray`).
"""
