"""A ground-truth OpenAI-compatible streaming server on uvicorn + Starlette (the HTTP stack of vLLM/SGLang).

It exists to check tokenswarm's timings against a server whose framing, write pattern and
timing are uvicorn's, not the simulator's: it shares no code with ``tokenswarm.sim``
(neither its engine nor its HTTP handling) and writes the same ground-truth log, one JSON
line per request (``id``, ``endpoint``, ``status``, ``received``, ``prompt_tokens``,
``output_tokens``, ``finish_reason``, ``outcome``, ``chunks`` = ``[[written_s, tokens], ...]``),
with times on ``time.monotonic()`` like the simulator's, so ``benchmarks/truthjoin.py`` joins
either server's log to tokenswarm's records by response id.

It lives under ``benchmarks/`` and not in the ``tokenswarm`` package because it is measuring
equipment, not a product feature: installing tokenswarm does not pull in uvicorn, and keeping
it outside the package makes its independence from the simulator visible in the tree.

Modules: ``plan`` (pure: request parsing, lengths, chunk sizes, SSE bytes), ``app`` (the
Starlette app, its truth log and self-measurements), ``__main__`` (command line), ``testing``
(start it in its own process for tests and benchmarks).
"""
