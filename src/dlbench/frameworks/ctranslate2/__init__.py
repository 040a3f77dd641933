"""CTranslate2 (OpenNMT's inference engine for Transformer models): a Hugging Face folder written from
dlbench's weights, converted by CTranslate2's own ``TransformersConverter``, run by its ``Generator``."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="ctranslate2", order=7, distribution="ctranslate2", import_name="ctranslate2",
    description="CTranslate2 (Generator over a model converted from a Hugging Face folder; forward_batch, "
                "generate_tokens)",
    closures=("forward",), precisions=("fp32", "int8", "bf16"), runs_in="main",
    requires=("torch", "transformers"), backend="backend:Backend_", decoder="decoder:CTranslate2Decoder")
