"""Counting prompt tokens to size prompts: the server's ``/tokenize``, a local tokenizer, or an estimate.

Preference order in :func:`make_token_counter`:

1. the target's ``POST /tokenize`` in the first dialect that proves itself on a known text
   (:data:`DIALECTS`: vLLM/SGLang ``{"model", "prompt"}`` -> ``{"count"}``, llama.cpp
   ``{"content"}`` -> ``{"tokens": [...]}``, TGI ``{"inputs"}`` -> ``[{...}, ...]``); a
   404/405/connection error or no plausible count falls back (with a warning when only the
   estimate is left);
2. a local Hugging Face ``tokenizer.json`` named by the scenario (needs the ``tokenizers``
   package; a clear error if it is missing);
3. an estimate of :data:`DEFAULT_CHARS_PER_TOKEN` characters per token.

Counters are only used when prompt sources are built (calibration, see ``prompts.py``), never
per request. HTTP uses the standard library's ``http.client`` (it cooperates with gevent's
monkey-patching) on one kept-alive connection: a worker sizing ``mix.yaml`` asks ~320 times.
The token counts recorded for requests always come from the server's ``usage``, not from here.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

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


#: A known text for the probe: 13 words, 74 characters -- any real tokenizer gives 10-40 tokens.
PROBE_TEXT = "The quick brown fox jumps over the lazy dog, then naps under the old oak tree."


def _plausible(count: int, text: str) -> bool:
    """A count a real tokenizer could give for ``text`` (ASCII): 1 token per 1..12 characters."""
    return len(text) / 12.0 <= count <= len(text)


def _count_or_tokens(data: Any) -> int | None:
    """vLLM / SGLang: ``{"count": n, "tokens": [...]}``."""
    if not isinstance(data, dict):
        return None
    count = data.get("count")
    if count is None and isinstance(data.get("tokens"), list):
        count = len(data["tokens"])
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _tokens_list(data: Any) -> int | None:
    """llama.cpp's server: ``{"tokens": [ids]}``."""
    if isinstance(data, dict) and isinstance(data.get("tokens"), list):
        return len(data["tokens"])
    return None


def _tgi_list(data: Any) -> int | None:
    """TGI: a JSON list of ``{"id", "text", "start", "stop"}`` objects."""
    return len(data) if isinstance(data, list) else None


@dataclass(frozen=True)
class TokenizeDialect:
    """How one engine's ``POST /tokenize`` is asked and answered."""

    name: str
    body: Callable[[str, str | None], dict[str, Any]]
    parse: Callable[[Any], int | None]


def _vllm_body(text: str, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": text}
    if model and model != "auto":
        body["model"] = model
    return body


#: Tried in this order by :meth:`ServerTokenizeCounter.probe`; the first that proves itself is used.
DIALECTS: tuple[TokenizeDialect, ...] = (
    TokenizeDialect("vllm/sglang", _vllm_body, _count_or_tokens),
    # llama.cpp reads "content" and answers {"tokens": []} to a vLLM body: the probe rejects that.
    TokenizeDialect("llama.cpp", lambda text, _m: {"content": text, "add_special": False}, _tokens_list),
    TokenizeDialect("tgi", lambda text, _m: {"inputs": text}, _tgi_list),
)


class ServerTokenizeCounter:
    """The target's ``POST {root}/tokenize`` in one engine's dialect. Use :meth:`probe` first.

    The probe tries every :data:`DIALECTS` entry with :data:`PROBE_TEXT` and keeps the first
    whose answer is a plausible non-zero count, so a server that accepts a request but ignores
    its text (``{"tokens": []}``) is not taken for a counter. If a call fails after a
    successful probe (server restarted, overloaded), the count falls back to ``fallback`` and
    a warning is logged once, so that building prompts never aborts a run: prompt lengths are
    targets, the record keeps the server's own count. All requests go through
    :meth:`_request`, the one place where headers are applied, on one kept-alive connection
    (:meth:`close` ends it; a later count opens a new one).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None,
        headers: dict[str, Any] | None = None,
        timeout_s: float = 5.0,
        fallback: TokenCounter | None = None,
    ):
        self.url = tokenize_url(base_url)
        self._parts = urllib.parse.urlsplit(self.url)
        self._target = (self._parts.path or "/") + (f"?{self._parts.query}" if self._parts.query else "")
        self.model = model
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.timeout_s = timeout_s
        self.fallback = fallback or EstimateCounter()
        self.name = f"server:{self.url}"
        self.dialect: TokenizeDialect = DIALECTS[0]
        self.calls = 0
        self.probe_failures: list[str] = []  #: why each dialect was rejected (for the warning)
        self._warned = False
        self.connections = 0  #: connections opened (one for all the counts while the server keeps it open)
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # one exchange at a time on the connection (a greenlet lock under gevent)

    def _request(self, body: dict[str, Any]) -> Any:
        """POST ``body`` to ``/tokenize`` with the counter's headers; the decoded JSON answer.

        Raises ``urllib.error.HTTPError`` for an answer that is not 2xx and ``OSError`` when the
        server cannot be reached or the exchange breaks. A kept-alive connection the server has
        closed meanwhile is replaced once (``/tokenize`` changes nothing on the server).
        """
        data = json.dumps(body).encode()
        self.calls += 1
        with self._lock:
            reused = self._conn is not None
            try:
                status, reason, headers, payload = self._exchange(data)
            except _STALE as exc:
                if not reused:
                    raise
                log.debug("%s: kept-alive connection closed by the server (%s); reconnecting", self.url, exc)
                status, reason, headers, payload = self._exchange(data)  # once more, on a new connection
        if not 200 <= status < 300:
            raise urllib.error.HTTPError(self.url, status, reason, headers, None)
        return json.loads(payload)

    def _exchange(self, data: bytes) -> tuple[int, str, Any, bytes]:
        """One POST and its answer. Whatever breaks it closes the connection and is an ``OSError``
        (http.client's own errors -- a malformed status line, say -- are not)."""
        try:
            if self._conn is None:
                self._conn = _connection(self._parts, self.timeout_s)
                self.connections += 1
            self._conn.request("POST", self._target, body=data, headers=self.headers)
            resp = self._conn.getresponse()
            payload = resp.read()
        except OSError:
            self.close()
            raise
        except http.client.HTTPException as exc:
            self.close()
            raise OSError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.will_close:  # the server closes after answering: the next count opens a new connection
            self.close()
        return resp.status, resp.reason, resp.headers, payload

    def close(self) -> None:
        """Close the kept-alive connection (prompt sources are built: no more counts expected)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _post(self, text: str, dialect: TokenizeDialect | None = None) -> int:
        d = dialect or self.dialect
        data = self._request(d.body(text, self.model))
        count = d.parse(data)
        if count is None or count < 0:
            raise ValueError(f"{self.url}: the {d.name} answer has no token count: {str(data)[:200]}")
        return count

    def probe(self) -> bool:
        """True if some dialect counts :data:`PROBE_TEXT` plausibly (that dialect is then used)."""
        self.probe_failures = []
        for d in DIALECTS:
            try:
                n = self._post(PROBE_TEXT, d)
            except urllib.error.HTTPError as exc:
                self.probe_failures.append(f"{d.name}: HTTP {exc.code}")
                if exc.code in (404, 405):
                    break  # no /tokenize route at all: other bodies will not help
                continue
            except (urllib.error.URLError, OSError) as exc:
                self.probe_failures.append(f"{d.name}: {exc}")
                break  # unreachable: do not wait for every dialect's timeout
            except ValueError as exc:
                self.probe_failures.append(f"{d.name}: {str(exc)[:120]}")
                continue
            if n == 0 or not _plausible(n, PROBE_TEXT):
                self.probe_failures.append(
                    f"{d.name}: counted {n} tokens in a {len(PROBE_TEXT)}-character probe text (implausible)")
                continue
            self.dialect = d
            log.info("%s counts tokens in the %s dialect (probe: %d tokens)", self.url, d.name, n)
            return True
        log.info("no usable /tokenize at %s (%s); sizing prompts another way", self.url,
                 "; ".join(self.probe_failures))
        return False

    def count(self, text: str) -> int:
        try:
            return self._post(text)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if not self._warned:
                log.warning("%s failed (%s); using %s for prompt sizing", self.url, exc, self.fallback.name)
                self._warned = True
            return self.fallback.count(text)


#: a kept-alive connection the server closed between two counts (its idle timeout, a restart)
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _connection(parts: urllib.parse.SplitResult, timeout_s: float) -> http.client.HTTPConnection:
    """A new (not yet connected) connection to the URL's host; TLS verified as ``urllib`` would."""
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout_s,
                                           context=ssl.create_default_context())
    if parts.scheme != "http":
        raise OSError(f"{parts.geturl()}: not an http or https URL")
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)


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
    headers: dict[str, Any] | None = None,
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
    if base_url:
        # The server has its own tokenizer but would not count for us: say what that means.
        log.warning("no usable /tokenize at %s answered in a known dialect (vllm/sglang, llama.cpp, tgi); "
                    "prompts are sized with %s, so the server may count different prompt lengths -- the "
                    "report compares requested with server-counted prompt tokens per task",
                    tokenize_url(base_url), counter.name)
    else:
        log.info("sizing prompts with %s (no /tokenize, no tokenizer.json)", counter.name)
    return counter
