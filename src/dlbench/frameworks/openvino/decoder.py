"""OpenVINO's decoder: the graph with past that ONNX Runtime's decoder runs, compiled by OpenVINO
(it shares the export, so it lives beside ONNX Runtime's in :mod:`dlbench.frameworks.onnxruntime.decoder`)."""

from dlbench.frameworks.onnxruntime.decoder import OpenVINODecoder

__all__ = ["OpenVINODecoder"]
