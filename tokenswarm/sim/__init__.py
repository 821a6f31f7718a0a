"""The simulated GPU serving stack: an OpenAI/vLLM-compatible HTTP server driven by a
time-injected engine model (continuous batching, prefill, KV capacity, speculative decoding).

Modules: :mod:`.tokenizer` (word/punctuation tokenizer), :mod:`.profiles` (YAML cost
profiles), :mod:`.textgen` (deterministic "target"/"draft" models), :mod:`.engine` (the pure
scheduler), :mod:`.sequence` (one request inside it), :mod:`.faults`, :mod:`.simmetrics`
(Prometheus text), :mod:`.truth` (ground-truth log), :mod:`.server` (gevent HTTP/1.1),
:mod:`.cli`, :mod:`.testing` (start a simulator in tests).
"""
