"""The baseline's request bodies are the scenario's: built by tokenswarm's workload code, one a line."""

import json

from benchmarks.bench_bodies import build_bodies, write_bodies
from benchmarks.truthserver.testing import start_truth
from tests.helpers.runs import ROOT


def test_the_bodies_of_qa_carry_its_sampling_and_answer_lengths_and_repeat_on_the_same_seed(tmp_path):
    with start_truth(tmp_path / "truth.jsonl") as srv:
        first = build_bodies(ROOT / "scenarios" / "qa.yaml", srv.base_url, 4, 5)
        again = build_bodies(ROOT / "scenarios" / "qa.yaml", srv.base_url, 4, 5)
    assert first == again
    bodies = [json.loads(b) for b in first]
    assert len(bodies) == 20
    # scenarios/qa.yaml: temperature 0.7, top_p 0.95, max_tokens uniform 32-256, chat messages
    assert {(b["temperature"], b["top_p"]) for b in bodies} == {(0.7, 0.95)}
    assert all(32 <= b["max_tokens"] <= 256 for b in bodies)
    assert len({b["max_tokens"] for b in bodies}) > 1
    assert all(b["stream"] and b["stream_options"]["include_usage"] for b in bodies)
    assert all(b["messages"][-1]["role"] == "user" and b["messages"][-1]["content"] for b in bodies)
    assert len({b["messages"][-1]["content"] for b in bodies}) > 1


def test_the_bodies_of_mix_deal_its_tasks_with_their_own_fields(tmp_path):
    with start_truth(tmp_path / "truth.jsonl") as srv:
        bodies = [json.loads(b) for b in build_bodies(ROOT / "scenarios" / "mix.yaml", srv.base_url, 9, 4)]
    assert len(bodies) == 36
    # scenarios/mix.yaml: extraction sends a JSON Schema response_format at temperature 0.0;
    # summarization asks for 64 tokens of a 1,000-8,000-token document, without sampling fields
    extraction = [b for b in bodies if "response_format" in b]
    assert extraction and all(b["temperature"] == 0.0 and 64 <= b["max_tokens"] <= 192 for b in extraction)
    summaries = [b for b in bodies if "temperature" not in b and b["max_tokens"] == 64
                 and len(b["messages"][-1]["content"]) > 3000]
    assert summaries
    assert len(extraction) + len(summaries) < len(bodies)


def test_the_file_holds_one_body_a_line(tmp_path):
    path = tmp_path / "bodies.jsonl"
    write_bodies(path, [b'{"a":"x\\ny"}', b'{"b":2}'])
    assert [json.loads(line) for line in path.read_bytes().splitlines()] == [{"a": "x\ny"}, {"b": 2}]
