"""PyTensor (Theano's successor), in an environment of its own (the parts: backend, recipe)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="pytensor", order=12, distribution="pytensor", import_name="pytensor",
    description="PyTensor (Theano's successor: compiled graphs; Numba or C linker)", variants=("numba", "c"),
    runs_in="env", recipes=("requirements.txt", "requirements.lock"))
