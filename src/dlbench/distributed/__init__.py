"""The scaling scenario's engine: data-parallel workers (torch DDP, JAX, TensorFlow, a Ray
parameter server), the network between them, the scaling model and its table.
"""
