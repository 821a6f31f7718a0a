"""The server's reported values made fit for a record: token counts, labels and spec-decode
numbers checked (a plain problem text for one no record can hold), and error objects and bodies
cut to a short, redacted text."""

from __future__ import annotations

from typing import Any

import orjson

from tokenswarm.redact import redact

__all__ = ["INT64_MAX", "error_from_body", "error_text", "implausible", "reported_count", "reported_label",
           "spec_decode_problem"]

#: The largest integer a record (JSON through orjson) and the analysis can hold.
INT64_MAX = 2**63 - 1


def reported_count(name: str, v: Any, bound: int) -> tuple[int | None, str | None]:
    """A token count the server reported: ``(value, None)``, ``(None, None)`` when absent, or
    ``(None, problem)`` when it is not an integer in ``0..bound``."""
    if v is None:
        return None, None
    if type(v) is int and 0 <= v <= bound:
        return v, None
    return None, implausible(name, v, None, bound)


def _shown(v: Any) -> str:
    """A reported value as a problem text shows it: its repr, cut to 40 characters."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def implausible(name: str, v: Any, previous: int | None, bound: int) -> str:
    """The plain message for a count no stream could carry (the value shown, shortened)."""
    shown = _shown(v)
    if type(v) is not int:
        why = "not an integer"
    elif v < 0:
        why = "negative"
    elif previous is not None and v < previous:
        why = f"less than the {previous} reported before"
    else:
        why = f"more than this request can carry ({bound})"
    return f"server reported {name}={shown}: {why}"


def reported_label(name: str, v: Any) -> tuple[str | None, str | None]:
    """A short text field from the server (id, finish_reason): a non-string is a problem."""
    if v is None or type(v) is str:
        return v, None
    return None, f"server reported {name}={_shown(v)}: not a string"


def spec_decode_problem(sd: dict[str, Any], depth: int = 0) -> str | None:
    """A number in the server's spec-decode statistics that a record cannot hold (beyond int64,
    negative counts), or a nesting deeper than any engine sends; None when all is well."""
    for k, v in sd.items():
        items = v if type(v) is list else (v,)
        for x in items:
            if type(x) is int and not 0 <= x <= INT64_MAX:
                return implausible(f"spec_decode.{k}", x, None, INT64_MAX)
            if type(x) is dict:
                if depth >= 3:
                    return f"server reported spec_decode.{k} nested too deep"
                problem = spec_decode_problem(x, depth + 1)
                if problem:
                    return problem
    return None


def error_text(obj: dict[str, Any]) -> str:
    """Short text for an error object sent inside a stream or as an HTTP error body."""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        kind = err.get("type") or err.get("code") or "error"
        msg = err.get("message") or ""
        return f"{kind}: {redact(str(msg))[:160]}" if msg else str(kind)
    return redact(str(err))[:160]


def error_from_body(status: int, body: bytes) -> str:
    """``HTTP <status>: <server message>`` from an OpenAI/vLLM-style JSON error body."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        if "detail" in obj and "error" not in obj and "message" not in obj:
            return f"HTTP {status}: {redact(str(obj['detail']))[:160]}"
        return f"HTTP {status}: {error_text(obj)}"
    snippet = redact(body[:1024].decode("utf-8", "replace")).strip()[:120] if body else ""
    return f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}"
