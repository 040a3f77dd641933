"""H2O-3 deep learning on its JVM cluster, in an environment of its own (the parts: backend, recipe).
It times whole epochs and whole-frame predictions, in place of single batches."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="h2o", order=14, distribution="h2o", import_name="h2o",
    description="H2O-3 deep learning (JVM cluster; multilayer perceptrons, whole epochs)",
    closures=("epoch", "predict"), stands_in={"train_step": "epoch", "forward": "predict"},
    runs_in="env", recipes=("requirements.txt", "requirements.lock"))
