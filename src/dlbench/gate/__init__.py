"""The equivalence gate: every framework's model checked against the float64 reference
(:mod:`~dlbench.gate.reference`) before it is timed (:mod:`~dlbench.gate.verify`).
"""
