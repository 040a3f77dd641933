"""Generation: greedy decoding of a decoder-only language model with a key/value cache, as an LLM is
served (prefill of the prompt, then one token per step), in each framework's idiomatic way.

* :mod:`~dlbench.generation.decoder`: what every framework's decoder is (the :class:`Decoder`
  contract), which models it can decode and how long their context is, and the greedy loop that
  times time-to-first-token and time-per-output-token the same way for all;
* one module per framework (``torch_decoder``, ``jax_decoder``, ``tf_decoder``; ``onnx_decoder`` for
  ONNX Runtime and OpenVINO): the decoder over a fixed-size cache;
* :mod:`~dlbench.generation.gate`: the generation gate (cache against recomputation, tokens against
  the float64 reference with ties at the reference's top-1 margin);

The scenarios that time and load them, with their settings (prompt, new tokens, TTFT/TPOT targets),
are :mod:`dlbench.scenarios.generate` and :mod:`dlbench.scenarios.generate_loadgen`.
"""
