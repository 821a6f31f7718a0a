"""A fake engine's /tokenize, one token per whitespace-separated word: ``fake_tokenize.py PORT LIFETIME_S``.

``FAKE_TOKENIZE_MODE`` picks the dialect: ``vllm`` (``{"prompt"}`` -> ``{"count", "tokens",
"max_model_len"}``), ``llamacpp`` (reads ``content``; a vLLM body gets ``{"tokens": []}``, as
llama.cpp's server answers), ``tgi`` (``{"inputs"}`` -> a list of tokens), ``constant``
(always one token: a counter that must fail the probe) or ``none`` (404 everywhere).
With ``FAKE_TOKENIZE_KEY`` set, a request without ``Authorization: Bearer KEY`` gets 401.
``GET /stats`` answers ``{"tokenize_calls": N}``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its sibling modules
from jsonhttp import JSONHandler, serve

MODE = os.environ.get("FAKE_TOKENIZE_MODE", "vllm")
KEY = os.environ.get("FAKE_TOKENIZE_KEY")
CALLS = {"n": 0}


class Handler(JSONHandler):
    def do_GET(self) -> None:
        self.answer_json(200, {"tokenize_calls": CALLS["n"]})

    def do_POST(self) -> None:
        data = self.read_json() or {}
        if KEY is not None and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self.answer_json(401, {"error": "no key"})
        if MODE == "none" or self.path != "/tokenize":
            return self.answer_json(404, {"detail": "Not Found"})
        CALLS["n"] += 1
        if MODE == "vllm":
            n = len(data["prompt"].split())
            return self.answer_json(200, {"count": n, "max_model_len": 4096, "tokens": list(range(n)),
                                          "model": data.get("model")})
        if MODE == "llamacpp":
            return self.answer_json(200, {"tokens": list(range(len(data.get("content", "").split())))})
        if MODE == "tgi":
            if "inputs" not in data:
                return self.answer_json(422, {"error": "missing field inputs"})
            return self.answer_json(200, [{"id": i, "text": w, "start": 0, "stop": 1}
                                          for i, w in enumerate(data["inputs"].split())])
        if MODE == "constant":
            return self.answer_json(200, {"count": 1})
        return self.answer_json(404, {"detail": "Not Found"})


if __name__ == "__main__":
    serve(Handler)
