"""Apache MXNet 1.9 (Gluon), in an environment of its own (the parts: backend, recipe)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="mxnet", order=10, distribution="mxnet", import_name="mxnet",
    description="Apache MXNet 1.9 (Gluon; hybridize = static graph)", variants=("imperative", "hybridize"),
    runs_in="env", recipes=("requirements.txt", "requirements.lock"))
