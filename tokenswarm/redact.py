"""The one redaction function: no secret reaches a file, a terminal, a message or a web page.

Every sink calls :func:`redact` (text, or JSON-like data) or :func:`redact_bytes` (encoded
lines): records, the manifest, the run log, reports, CSV files, the web UI and its CSV,
batches between workers and the master, error messages. Two kinds of secret are masked:

* **known values** -- registered with :func:`remember` when a process learns them: the key
  read from ``target.api_key_env``, secret-looking header values (scenario or ``--set``), the
  password of a URL's user info (``http://user:password@host``). Any occurrence is masked,
  whatever text surrounds it (a gateway that echoes request headers in its error, a URL in an
  exception message).
* **secret-looking patterns** -- for values never registered (a key typed in a ``--set``
  before the scenario was parsed, a header a server invents): the value of any ``Authorization`` header,
  ``Bearer <token>``, ``sk-...``-style keys, ``api_key=...``/``password: ...`` pairs, and the
  user info of any URL.

A masked value becomes ``***``. Redaction is idempotent and never raises.

Redacted text is also made **inert** (:func:`inert`): control characters a server may put in
its text (ESC of terminal escapes, OSC titles, carriage returns that overwrite a line, the C1
range) are written as visible ``\\xNN`` escapes, so what reaches a terminal, ``report.md``,
``errors.csv`` or a log is read, never executed. Tab and newline stay. Encoded JSON lines
(:func:`redact_bytes`) need no such step: JSON escapes control characters itself.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

MASK = "***"
#: values shorter than this are not registered: masking "a" or "1" everywhere would garble output
MIN_SECRET_LEN = 4

# re.ASCII: \b and \s mean the same on text as on encoded lines (redact_bytes), so every sink masks
# the same; with Unicode rules a key right after a non-ASCII letter ("ésk-...") had no \b in text.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # the value of an Authorization header, whatever its scheme (echoed by a gateway, in a --set)
    (re.compile(r"(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?![\s\"']*\*\*\*)(?!(?:true|false|null)\b)"
                r"[^\"'\r\n,;}]+", re.IGNORECASE | re.ASCII),
     r"\1" + MASK),
    # a bearer credential anywhere else
    (re.compile(r"\b(Bearer)\s+(?![\s\"']*\*\*\*)[A-Za-z0-9._~+/\-]{8,}=*", re.IGNORECASE | re.ASCII), r"\1 " + MASK),
    # user info of a URL: scheme://user:password@host -> scheme://***@host
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)(?!\*\*\*@)[^/\s@'\"<>]+@", re.ASCII), r"\1" + MASK + "@"),
    # provider key shapes (OpenAI sk-, Hugging Face hf_, Groq gsk_, xAI xai-, GitHub ghp_ ...)
    (re.compile(r"\b(?:sk|pk|rk|hf|gsk|xai|ghp|gho|glpat)[-_][A-Za-z0-9_\-]{8,}", re.ASCII), MASK),
    # key=value / "key": "value" forms naming a secret (not "is_secret": false: JSON must stay valid;
    # not the bracket of a list, 'api_key': [...]: a known value inside it is masked, the words stay)
    (re.compile(r"(\b(?:api[_-]?key|access[_-]?token|password|secret)[\"']?\s*[:=]\s*[\"']?)"
                r"(?![\s\"']*\*\*\*)(?!(?:true|false|null)\b)[^\s\"',;&}[\]]+",
                re.IGNORECASE | re.ASCII), r"\1" + MASK),
)

_lock = threading.Lock()
_known: set[str] = set()
_known_re: re.Pattern[str] | None = None
_known_re_b: re.Pattern[bytes] | None = None
_known_b: tuple[bytes, ...] = ()  # the registered values, encoded: redact_bytes's cheap test
_PATTERNS_B = tuple((re.compile(p.pattern.encode(), p.flags & ~re.UNICODE), r.encode()) for p, r in _PATTERNS)

# redact_bytes runs each pattern only where it can match (the writer redacts every record line,
# and the five patterns cost ~140 us per 2 KB record; these tests ~12 us). A test looks for the
# literals a match must contain in ``data`` with every byte but letters and ``-_:/@`` deleted
# (lower-cased for the case-insensitive patterns): deleting bytes never splits a literal made of
# kept bytes, so a pattern whose literals are absent cannot match (false positives only run it).
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_:/@")
_DROP = bytes(b for b in range(256) if b not in _KEPT)
_PROVIDER_PREFIX_B = re.compile(rb"(?:sk|pk|rk|hf|gsk|xai|ghp|gho|glpat)[-_]")
_GATES_B: tuple[Any, ...] = (  # one per entry of _PATTERNS, in order: (kept, lowered) -> may match
    lambda kept, low: b"authorization" in low,
    lambda kept, low: b"bearer" in low,
    lambda kept, low: b"://" in kept and b"@" in kept,
    lambda kept, low: _PROVIDER_PREFIX_B.search(kept) is not None,
    lambda kept, low: any(w in low for w in (b"password", b"secret", b"apikey", b"api_key", b"api-key",
                                              b"accesstoken", b"access_token", b"access-token")),
)
assert len(_GATES_B) == len(_PATTERNS)


def _gate_mask(data: bytes) -> int:
    """Bit i set when ``_PATTERNS_B[i]`` may match ``data`` (``_GATES_B[i]`` says so)."""
    kept = data.translate(None, _DROP)
    low = kept.lower()
    return sum(1 << i for i, may_match in enumerate(_GATES_B) if may_match(kept, low))


#: The same mask from the C extension in one pass (``tokenswarm.wire._fastread.redact_gates``),
#: installed by :mod:`tokenswarm.wire.native` when the extension is built: this module sits
#: below the wire and cannot import it. In Python the five tests cost ~30 us per record line.
_gate_mask_fn: Callable[[bytes], int] = _gate_mask


def use_gate_mask(fn: Callable[[bytes], int] | None) -> None:
    """Compute :func:`redact_bytes`'s gates with ``fn`` (same answers as :func:`_gate_mask`),
    or with the Python tests again (``None``)."""
    global _gate_mask_fn
    _gate_mask_fn = _gate_mask if fn is None else fn

T = TypeVar("T")


#: Header names whose values are secrets (defined here, the lowest layer; the scenario loader
#: masks the same headers when it prints a resolved scenario).
SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)

def remember(*values: str | None) -> None:
    """Register secret values (keys, passwords, header values) to be masked from now on."""
    global _known_re, _known_re_b, _known_b
    new = {v for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_LEN}
    new |= {unquote(v) for v in new}  # a password in a URL may be percent-encoded
    with _lock:
        if new <= _known:
            return
        _known.update(new)
        alternatives = "|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True))
        _known_re = re.compile(alternatives)
        _known_re_b = re.compile(alternatives.encode())
        _known_b = tuple(v.encode() for v in _known)


def forget_all() -> None:
    """Drop every registered value (tests; a process reused for another run)."""
    global _known_re, _known_re_b, _known_b
    with _lock:
        _known.clear()
        _known_re = _known_re_b = None
        _known_b = ()


def url_secrets(url: str | None) -> list[str]:
    """The user info of ``url`` (password, and the whole ``user:password``), if any."""
    if not url or "@" not in url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    out = []
    if parts.password:
        out += [parts.password, f"{parts.username}:{parts.password}"]
    elif parts.username:
        out.append(parts.username)  # a bare token as user name (https://TOKEN@host)
    return out


def remember_target(target: Any, base_url: str | None = None) -> None:
    """Register everything secret a scenario's target holds (key, headers, URL user info)."""
    values: list[str | None] = [target.api_key()]
    values += [v for k, v in target.headers.items() if SECRET_HEADER.search(k)]
    for url in (base_url, target.base_url, target.metrics_url, *(u for _, u in target.extra_metrics)):
        values += url_secrets(url)
    remember(*values)


#: Control characters that act on a terminal: C0 but tab and newline, DEL, and C1.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def inert(text: str) -> str:
    r"""``text`` with every control character but tab and newline written as ``\xNN``.

    ``"\x1b[2J"`` (clear screen) becomes the visible text ``\x1b[2J``; idempotent.
    """
    if _CONTROL.search(text) is None:  # the common case: one scan, no copy
        return text
    return _CONTROL.sub(_escape, text)


def redact_text(text: str) -> str:
    """``text`` with known secrets and secret-looking patterns replaced by ``***``, made
    :func:`inert`."""
    known = _known_re
    if known is not None:
        text = known.sub(MASK, text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return inert(text)


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact_text` for encoded text (JSON lines): no decode when nothing matches.

    Each pattern runs only when the literals it needs are in ``data`` (``_GATES_B``), and the
    registered values only when one of them is: the same result, without five regex scans of
    every record line.
    """
    known, values = _known_re_b, _known_b
    if known is not None and any(v in data for v in values):
        data = known.sub(MASK.encode(), data)
    mask = _gate_mask_fn(data)  # on the data before any substitution, as the tests were designed
    if mask:
        for i, (pattern, repl) in enumerate(_PATTERNS_B):
            if mask >> i & 1:
                data = pattern.sub(repl, data)
    return data


def redact(value: T) -> T:
    """The redaction function: strings, bytes, and dicts/lists/tuples of them (keys too), recursively.

    Other values (numbers, None) are returned unchanged; the structure's type is kept.
    """
    if isinstance(value, str):
        return redact_text(value)  # type: ignore[return-value]  # the same type back: a str stays a str
    if isinstance(value, bytes):
        return redact_bytes(value)  # type: ignore[return-value]  # the same type back: bytes stay bytes
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}  # type: ignore[return-value]  # the same type back: a mapping stays a mapping
    if isinstance(value, list):
        return [redact(v) for v in value]  # type: ignore[return-value]  # the same type back: a list stays a list
    if isinstance(value, tuple):
        return tuple(redact(v) for v in value)  # type: ignore[return-value]  # the same type back: a tuple stays a tuple
    return value


def redact_all(values: Iterable[str]) -> list[str]:
    """A command line (or any list of strings) with every element redacted."""
    return [redact_text(v) for v in values]


class _RedactingFactory:
    """A log record factory that formats and redacts each message once, at creation."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        record = self.inner(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string stays the logging module's problem
            return record
        clean = redact_text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        return record


def install_log_redaction() -> None:
    """Redact every log record of this process (Locust's and ours), whatever handler prints it."""
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _RedactingFactory):
        logging.setLogRecordFactory(_RedactingFactory(factory))
