"""OpenVINO GenAI: the Hugging Face model dlbench writes, converted by OpenVINO's own ``convert_model`` to a
stateful IR (weight-compressed by NNCF for int8 and int4), run by its ``LLMPipeline`` (the parts: convert,
backend, decoder)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="openvino-genai", order=9, distribution="openvino-genai", import_name="openvino_genai",
    description="OpenVINO GenAI (LLMPipeline over a stateful IR from openvino.convert_model; NNCF weight compression)",
    requires=("openvino", "openvino_tokenizers", "nncf", "torch", "transformers"), closures=("forward",),
    precisions=("fp32", "int8", "int4"), decoder="decoder:OpenVINOGenAIDecoder")
