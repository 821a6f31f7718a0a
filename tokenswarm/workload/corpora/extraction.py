"""Structured-extraction tasks: JSON Schemas shipped with tokenswarm, and their source texts.

Each :class:`ExtractionSchema` pairs a JSON Schema (draft 2020-12, the subset that vLLM's and
SGLang's guided decoding accept: objects, arrays, strings, integers, booleans, ``required``,
``additionalProperties: false``) with the built-in corpus its documents come from:

* ``topic_card`` - a section of Python's language reference (``pydoc_data``, prose);
* ``module_card`` - an excerpt of a standard-library module (code);
* ``contact_record`` - a short record rendered as ``key: value`` lines (built from the
  prose corpus' section titles, so it needs no data files).

Nothing is downloaded; the texts are what ships with Python.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExtractionSchema:
    """A named JSON Schema, the corpus its documents come from and the instruction to send."""

    name: str
    corpus: str  # "prose", "code" or "record"
    instruction: str
    schema: dict[str, Any]


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or list(props),
            "additionalProperties": False}


_STR = {"type": "string"}
_STR_LIST = {"type": "array", "items": {"type": "string"}}

SCHEMAS: tuple[ExtractionSchema, ...] = (
    ExtractionSchema(
        "topic_card", "prose",
        "Extract a topic card from the documentation below: its title, a one-sentence summary, "
        "up to eight keywords, and whether it contains a code example.",
        _obj({"title": _STR, "summary": _STR, "keywords": {**_STR_LIST, "maxItems": 8},
              "has_code_example": {"type": "boolean"}}),
    ),
    ExtractionSchema(
        "module_card", "code",
        "Extract a card for the Python code below: the classes and functions it defines, the modules "
        "it imports and its purpose in one sentence.",
        _obj({"classes": _STR_LIST, "functions": _STR_LIST, "imports": _STR_LIST, "purpose": _STR}),
    ),
    ExtractionSchema(
        "contact_record", "record",
        "Extract the contact from the record below: name, email, age as an integer, the city, and the "
        "list of topics the person asked about.",
        _obj({"name": _STR, "email": _STR, "age": {"type": "integer", "minimum": 0},
              "city": _STR, "topics": _STR_LIST}, ["name", "email", "age", "topics"]),
    ),
)

_FIRST = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim")
_LAST = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Perlman", "Peters")
_CITIES = ("Amsterdam", "Boston", "Cambridge", "Delft", "Edinburgh", "Zurich", "Kyoto", "Lagos", "Lima", "Oslo")


def contact_record(rng: random.Random, topics: Sequence[str], n_chars: int) -> str:
    """A ``key: value`` record of one person, padded with ticket notes to about ``n_chars``."""
    first, last = _FIRST[rng.randrange(len(_FIRST))], _LAST[rng.randrange(len(_LAST))]
    lines = [
        f"customer_name: {first} {last}",
        f"customer_email: {first.lower()}.{last.lower()}@example.org",
        f"customer_age: {rng.randint(19, 88)}",
        f"city: {_CITIES[rng.randrange(len(_CITIES))]}",
        f"ticket_id: T-{rng.randrange(10**6):06d}",
    ]
    i = 0
    length = sum(len(x) + 1 for x in lines)  # kept as lines are added: summing each time was quadratic
    while length < n_chars and topics:
        t = topics[rng.randrange(len(topics))]
        lines.append(f"note_{i}: the customer asked about {t} and wants an example.")
        length += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines)


def schema_by_name(name: str) -> ExtractionSchema:
    """The shipped schema called ``name`` (KeyError if none)."""
    for s in SCHEMAS:
        if s.name == name:
            return s
    raise KeyError(name)
