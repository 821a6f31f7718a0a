"""The schema check of structured answers (``schema_valid``) gives the verdicts of the reference
implementation, ``jsonschema``, on the shipped schemas, with a validator that is cheaper to import."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from typing import Any, Iterator

import jsonschema
import orjson
import pytest

from tokenswarm.sim.guided import instance
from tokenswarm.workload import quality
from tokenswarm.workload.corpora.extraction import SCHEMAS

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


def variants(schema: dict[str, Any], valid: Any, rng: random.Random) -> Iterator[Any]:
    """``valid`` and what models get wrong about it: a key missing, an extra key, values of
    another type (a string for a number, a float or a huge number for an integer, an object for
    a list), a list past ``maxItems``, and not an object at all."""
    yield valid
    for key in list(valid):
        missing = dict(valid)
        del missing[key]
        yield missing
        for wrong in ("text", 36, 36.0, 2.5, -1, 10**30, True, None, [], ["x", 1], {"k": "v"}):
            yield {**valid, key: wrong}
    yield {**valid, "unexpected": "field"}
    for key, prop in schema.get("properties", {}).items():
        if "maxItems" in prop:
            yield {**valid, key: ["w"] * (prop["maxItems"] + rng.randint(0, 1))}
    yield [valid]
    yield "plain text"


def cases() -> Iterator[tuple[str, dict[str, Any], Any]]:
    rng = random.Random(7)
    for spec in SCHEMAS:
        for _ in range(20):
            for value in variants(spec.schema, instance(spec.schema, rng, WORDS), rng):
                yield spec.name, spec.schema, copy.deepcopy(value)


def test_every_shipped_schema_compiles_to_a_draft_2020_12_validator():
    for spec in SCHEMAS:
        assert quality.validator(spec.schema).is_valid(instance(spec.schema, random.Random(1), WORDS)), spec.name


def test_the_verdicts_are_those_of_the_reference_implementation_on_the_shipped_schemas():
    checked = disagreements = 0
    verdicts = set()
    for name, schema, value in cases():
        text = json.dumps(value)  # orjson refuses integers past 64 bits; answers may hold them
        reference = jsonschema.Draft202012Validator(schema).is_valid(orjson.loads(text))  # what check_json parsed
        got = quality.check_json(text, schema)
        checked += 1
        verdicts.add(reference)
        if got != (True, reference):
            disagreements += 1
            print(f"{name}: {text[:120]} -> {got}, reference {reference}")
    assert disagreements == 0
    assert checked > 500 and verdicts == {True, False}  # both verdicts were exercised


def test_a_schema_that_is_not_a_valid_schema_is_refused_by_its_title():
    with pytest.raises(ValueError, match=r"JSON Schema 'broken card' is not a valid draft 2020-12 schema"):
        quality.validator({"title": "broken card", "type": "nonsense"})


def test_preloading_imports_the_validator_and_not_the_reference_library():
    code = ("import sys\nfrom tokenswarm.workload import quality\nquality.preload()\n"
            "print('jsonschema_rs' in sys.modules, 'jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]


def test_a_schema_object_is_serialised_once_and_an_equal_copy_finds_the_same_validator(monkeypatch):
    monkeypatch.setattr(quality, "_by_identity", {})  # as in a fresh worker, whatever ran before
    spec = SCHEMAS[0]
    first = quality.validator(spec.schema)
    dumps = []
    real = orjson.dumps
    monkeypatch.setattr(quality.orjson, "dumps", lambda *a, **k: dumps.append(a) or real(*a, **k))
    assert all(quality.validator(spec.schema) is first for _ in range(50))
    assert dumps == [], "the same schema object is found by its identity, not serialised per answer"
    assert quality.validator(copy.deepcopy(spec.schema)) is first  # an equal dict: found by its JSON
    assert len(dumps) == 1


def test_schemas_built_per_request_do_not_pile_up_in_the_identity_map(monkeypatch):
    monkeypatch.setattr(quality, "_by_identity", {})
    for i in range(3 * quality.MAX_IDENTITIES):
        schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": i % 3}}}
        assert quality.validator(schema).is_valid({"n": 5})
    assert len(quality._by_identity) <= quality.MAX_IDENTITIES
