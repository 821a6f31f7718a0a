"""Quality checks of structured outputs: does the answer parse as JSON, does it match the schema?

Used for ``extraction`` requests (and any request that asked for a JSON Schema). The answer
text is checked as the model sent it, with one allowance models commonly need: a single
surrounding Markdown code fence (```` ```json ... ``` ````) is removed first. Schema validation
uses ``jsonschema-rs`` (draft 2020-12, ``format`` as an annotation, as the draft says); validators
are built once per schema. It replaced the ``jsonschema`` library: imported after Locust, as in
a worker, it costs ~2-4 ms of CPU where ``jsonschema`` cost ~34-45 ms (~12 and ~46 ms in a bare
interpreter); ``tests/workload/test_quality.py`` checks that both give the same verdicts. The library is imported by :func:`preload` at test
start, and only when the scenario has extraction tasks (a first import inside the event loop
would stall it, so it is never left to the first answer).
"""

from __future__ import annotations

from typing import Any

import orjson

_validators: dict[bytes, Any] = {}  # jsonschema_rs.Draft202012Validator per schema (its sorted JSON)
#: the same validators by the schema object's identity, with the object kept alive so that its
#: id cannot be reused: every checked answer of a run asks with one of a few long-lived schema
#: dicts, which are serialised once instead of per answer
_by_identity: dict[int, tuple[dict[str, Any], Any]] = {}
#: identities remembered at most (schemas built per request would otherwise pile up here; past
#: this they are found by their JSON, as before)
MAX_IDENTITIES = 64


def preload() -> None:
    """Import the schema validator now (test start), not at the first checked answer."""
    _validator_class()


def _validator_class() -> Any:
    from jsonschema_rs import Draft202012Validator  # only for json_schema checks

    return Draft202012Validator


def validator(schema: dict[str, Any]) -> Any:
    """The draft 2020-12 validator of ``schema``, built once; ValueError naming the schema's
    ``title`` if it is not a valid schema (the shipped ones are checked by the tests). A schema
    dict is not to be changed once checked: the first answers' lookups remember it by identity."""
    known = _by_identity.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    v = _validators.get(key)
    if v is None:
        try:
            v = _validators[key] = _validator_class()(schema)
        except Exception as exc:  # jsonschema_rs.ValidationError: the schema breaks the metaschema
            raise ValueError(f"JSON Schema {schema.get('title', '(untitled)')!r} is not a valid draft "
                             f"2020-12 schema: {str(exc).splitlines()[0]}") from exc
    if len(_by_identity) < MAX_IDENTITIES:
        _by_identity[id(schema)] = (schema, v)
    return v


def strip_fence(text: str) -> str:
    """``text`` without one surrounding Markdown code fence (and outer whitespace)."""
    t = text.strip()
    if t.startswith("```") and t.endswith("```") and len(t) >= 6:
        body = t[3:-3]
        nl = body.find("\n")
        # the info string ("json") runs to the first newline
        return (body[nl + 1:] if nl >= 0 else body).strip()
    return t


def check_json(text: str, schema: dict[str, Any] | None) -> tuple[bool, bool | None]:
    """``(json_valid, schema_valid)`` of one answer; ``schema_valid`` is None without a schema."""
    try:
        value = orjson.loads(strip_fence(text))
    except orjson.JSONDecodeError:
        return False, (False if schema is not None else None)
    if schema is None:
        return True, None
    return True, validator(schema).is_valid(value)
