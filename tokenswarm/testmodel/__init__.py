"""A tiny, locally built Llama model for smoke tests against a real vLLM engine.

Nothing is downloaded: the tokenizer is trained on Python's own ``pydoc_data.topics`` text and
the weights are made with numpy. The weights are shaped, not trained: the residual stream is
dominated by the current token's embedding and the language-model head maps every token to a
fixed successor, so greedy decoding walks short cycles (``a b c d a b c d ...``). That output is
deterministic and repetitive, so n-gram (prompt-lookup) speculative decoding gets its drafts
accepted at temperature 0, while moderate logit margins let temperature 1 wander off the cycle
and lower acceptance.

* :func:`tokenswarm.testmodel.build.build_test_model` writes a model directory.
* :mod:`tokenswarm.testmodel.server` starts and stops a vLLM OpenAI server on it.
"""

from tokenswarm.testmodel.build import MANIFEST_NAME, ModelSpec, build_test_model, load_manifest

__all__ = ["MANIFEST_NAME", "ModelSpec", "build_test_model", "load_manifest"]
