"""The simulator's guided decoding: response_format answers are JSON instances of the schema."""

from __future__ import annotations

import pytest

from tokenswarm.sim.api import HttpError, parse_completion
from tokenswarm.sim.sequence import Sequence
from tokenswarm.sim.tokenizer import tokenize
from tokenswarm.workload.corpora.extraction import SCHEMAS
from tokenswarm.workload.quality import check_json

SOURCE = tokenize(" The for statement is used to iterate over the elements of a sequence such as a string or list.")


def answer(schema, seed: int | None = None) -> str:
    s = Sequence("r", len(SOURCE), SOURCE, 1000, guided=schema, seed=seed, temperature=0.7 if seed else 0.0)
    return "".join(s.text.token(i) for i in range(s.text.natural_len))


@pytest.mark.parametrize("spec", SCHEMAS, ids=lambda s: s.name)
def test_every_shipped_extraction_schema_gets_a_valid_instance(spec):
    for seed in (None, 1, 2, 3):
        assert check_json(answer(spec.schema, seed), spec.schema) == (True, True)


def test_string_values_are_copied_from_the_prompt_and_the_instance_is_deterministic():
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    text = answer(schema)
    assert text == answer(schema)
    value = text.split('"x":"')[1].rstrip('"}')
    assert value in " ".join("".join(SOURCE).split())


def body(response_format) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], "response_format": response_format}


def test_response_format_is_parsed_like_openai_and_a_malformed_one_is_a_400():
    assert parse_completion(body({"type": "text"}), "chat", "m", 4096).guided is None
    assert parse_completion(body({"type": "json_object"}), "chat", "m", 4096).guided["type"] == "object"
    schema = SCHEMAS[0].schema
    req = parse_completion(body({"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}),
                           "chat", "m", 4096)
    assert req.guided == schema
    for bad in ({"type": "xml"}, {"type": "json_schema"}, "json"):
        with pytest.raises(HttpError) as info:
            parse_completion({**body(bad), "model": "m"}, "chat", "m", 4096)
        assert info.value.status == 400
