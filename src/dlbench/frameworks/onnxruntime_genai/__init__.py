"""ONNX Runtime GenAI: its model builder's ONNX graph of a Hugging Face folder dlbench writes, run by its own
``Generator`` (the parts: convert, backend, decoder)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="onnxruntime-genai", order=8, distribution="onnxruntime-genai", import_name="onnxruntime_genai",
    description="ONNX Runtime GenAI (its model builder from a Hugging Face folder; og.Generator)",
    requires=("onnxruntime", "torch", "transformers"), closures=("forward",), precisions=("fp32", "int4"),
    decoder="decoder:OrtGenAIDecoder")
