"""Counting prompt tokens to size prompts: the server's ``/tokenize``, a local tokenizer, or an estimate.

Preference order in :func:`make_token_counter`:

1. the target's vLLM-compatible ``POST /tokenize`` (``{"model", "prompt"}`` -> ``{"count"}``),
   probed once; a 404/405/connection error falls back (logged, not raised);
2. a local Hugging Face ``tokenizer.json`` named by the scenario (needs the ``tokenizers``
   package; a clear error if it is missing);
3. an estimate of :data:`DEFAULT_CHARS_PER_TOKEN` characters per token.

Counters are only used when prompt sources are built (calibration, see ``prompts.py``), never
per request. HTTP uses stdlib ``urllib`` so that it cooperates with gevent's monkey-patching.
The token counts recorded for requests always come from the server's ``usage``, not from here.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

#: Estimate used when nothing better is available: ~4 characters per token is the usual rule
#: of thumb for English prose with BPE tokenizers (code is a little denser).
DEFAULT_CHARS_PER_TOKEN = 4.0


class TokenizerUnavailable(RuntimeError):
    """A tokenizer was asked for explicitly but cannot be used (missing package or file)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``name`` says where counts come from (for the manifest)."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (no special tokens or chat template)."""
        ...


class EstimateCounter:
    """``ceil(len(text) / chars_per_token)``; exact for nothing, cheap for everything."""

    def __init__(self, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN):
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.chars_per_token = chars_per_token
        self.name = f"estimate:{chars_per_token:g}chars/token"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, int(-(-len(text) // self.chars_per_token)))


class LocalTokenizerCounter:
    """A Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` package (no downloads)."""

    def __init__(self, path: str):
        try:
            from tokenizers import Tokenizer  # optional dependency
        except ImportError as exc:
            raise TokenizerUnavailable(
                f"{path}: the scenario names a tokenizer.json but the 'tokenizers' package is not "
                "installed (pip install tokenizers, or pip install 'tokenswarm[testmodel]')"
            ) from exc
        if not os.path.isfile(path):
            raise TokenizerUnavailable(f"{path}: tokenizer file not found")
        try:
            self._tok = Tokenizer.from_file(path)
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise TokenizerUnavailable(f"{path}: not a valid tokenizer.json ({exc})") from exc
        self.path = path
        self.name = f"tokenizer.json:{os.path.basename(path)}"

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


class ServerTokenizeCounter:
    """The target's ``POST {root}/tokenize``. Use :meth:`probe` before relying on it.

    If a call fails after a successful probe (server restarted, overloaded), the count falls
    back to ``fallback`` and a warning is logged once, so that building prompts never aborts a
    run: prompt lengths are targets, the record keeps the server's own count.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None,
        headers: dict | None = None,
        timeout_s: float = 5.0,
        fallback: TokenCounter | None = None,
    ):
        self.url = tokenize_url(base_url)
        self.model = model
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.timeout_s = timeout_s
        self.fallback = fallback or EstimateCounter()
        self.name = f"server:{self.url}"
        self.calls = 0
        self._warned = False

    def _post(self, text: str) -> int:
        body = {"prompt": text}
        if self.model and self.model != "auto":
            body["model"] = self.model
        req = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=self.headers, method="POST"
        )
        self.calls += 1
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            data = json.loads(resp.read())
        count = data.get("count") if isinstance(data, dict) else None
        if count is None and isinstance(data, dict) and isinstance(data.get("tokens"), list):
            count = len(data["tokens"])
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"{self.url}: response has no integer 'count': {str(data)[:200]}")
        return count

    def probe(self) -> bool:
        """True if the endpoint answers a tiny request with a count."""
        try:
            self._post("Hello, world.")
            return True
        except urllib.error.HTTPError as exc:
            log.info("no usable /tokenize at %s (HTTP %s); sizing prompts another way", self.url, exc.code)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.info("no usable /tokenize at %s (%s); sizing prompts another way", self.url, exc)
        return False

    def count(self, text: str) -> int:
        try:
            return self._post(text)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if not self._warned:
                log.warning("%s failed (%s); using %s for prompt sizing", self.url, exc, self.fallback.name)
                self._warned = True
            return self.fallback.count(text)


def tokenize_url(base_url: str) -> str:
    """``/tokenize`` lives at the server root (vLLM), also when the base URL ends in ``/v1``."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/tokenize"


def make_token_counter(
    base_url: str | None,
    model: str | None,
    tokenizer_path: str | None,
    headers: dict | None = None,
    timeout_s: float = 5.0,
) -> TokenCounter:
    """Choose the best available counter (server ``/tokenize``, local tokenizer, estimate).

    A missing ``tokenizers`` package or tokenizer file raises :class:`TokenizerUnavailable`
    only when the tokenizer is actually needed (no server ``/tokenize``).
    """
    local_error: TokenizerUnavailable | None = None
    local: TokenCounter | None = None
    if tokenizer_path:
        try:
            local = LocalTokenizerCounter(tokenizer_path)
        except TokenizerUnavailable as exc:
            local_error = exc
    if base_url:
        server = ServerTokenizeCounter(
            base_url, model, headers, timeout_s, fallback=local or EstimateCounter()
        )
        if server.probe():
            log.info("sizing prompts with %s", server.name)
            return server
    if local_error is not None:
        raise local_error
    if local is not None:
        log.info("sizing prompts with %s", local.name)
        return local
    counter = EstimateCounter()
    log.info("sizing prompts with %s (no /tokenize, no tokenizer.json)", counter.name)
    return counter
