"""Storing results: the SQLite store of runs, cells and raw samples (:mod:`~dlbench.storage.store`),
its writer's lease, and a stored cell with its statistics (:mod:`~dlbench.storage.cell_result`).
"""
