"""Hugging Face ``transformers`` as a framework: its own model classes loaded with dlbench's weights."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="transformers", order=6,
    distribution="transformers",
    import_name="transformers",
    description="Hugging Face transformers (its own GPT2/Llama/BERT/ViT classes from a folder of dlbench's "
                "weights; sdpa or eager attention, torch.compile; generate() with its own cache)",
    variants=("sdpa", "eager", "compile"),
    closures=("forward", "gradient", "train_step"),
    precisions=("fp32", "bf16"),
    runs_in="main",
    requires=("torch",),
    decoder="decoder:TransformersDecoder",
)
