"""Chainer 7, in an environment of its own (the parts: backend, recipe with build constraints)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="chainer", order=11, distribution="chainer", import_name="chainer", description="Chainer 7 (define-by-run)",
    runs_in="env",
    recipes=("requirements.txt", "requirements.lock", "requirements.build.txt", "requirements.build.lock"))
