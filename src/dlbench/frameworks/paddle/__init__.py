"""PaddlePaddle 3, in an environment of its own (the parts: backend, layers, recipe)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="paddle", order=13, distribution=("paddlepaddle", "paddlepaddle-gpu"), import_name="paddle",
    description="PaddlePaddle 3 (dynamic graph; paddle.jit.to_static)", variants=("dynamic", "to_static"),
    runs_in="env", recipes=("requirements.txt", "requirements.lock"))
