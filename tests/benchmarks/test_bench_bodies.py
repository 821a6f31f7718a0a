"""The baseline's request bodies are the scenario's: built by tokenswarm's workload code, one a line."""

import json

from benchmarks.bench_bodies import build_bodies, write_bodies
from benchmarks.truthserver.testing import start_truth
from tests.helpers.runs import ROOT
from tokenswarm.load.users import CLOSED_LOOP_USERS, OpenLoopUser


def parsed(lines: list[bytes]) -> list[tuple[float, dict]]:
    """``(think_s, body)`` of each ``THINK_S<TAB>BODY`` line."""
    return [(float(think), json.loads(body)) for think, body in (line.split(b"\t", 1) for line in lines)]


def test_the_bodies_of_qa_carry_its_sampling_and_answer_lengths_and_repeat_on_the_same_seed(tmp_path):
    weights = {cls: cls.weight for cls in (*CLOSED_LOOP_USERS, OpenLoopUser)}
    with start_truth(tmp_path / "truth.jsonl") as srv:
        first = build_bodies(ROOT / "scenarios" / "qa.yaml", srv.base_url, 4, 5)
        again = build_bodies(ROOT / "scenarios" / "qa.yaml", srv.base_url, 4, 5)
    assert first == again
    assert {cls: cls.weight for cls in weights} == weights, "the user classes' weights are left as they were"
    assert {think for think, _ in parsed(first)} == {0.0}  # qa.yaml: no think time
    bodies = [b for _, b in parsed(first)]
    assert len(bodies) == 20
    # scenarios/qa.yaml: temperature 0.7, top_p 0.95, max_tokens uniform 32-256, chat messages
    assert {(b["temperature"], b["top_p"]) for b in bodies} == {(0.7, 0.95)}
    assert all(32 <= b["max_tokens"] <= 256 for b in bodies)
    assert len({b["max_tokens"] for b in bodies}) > 1
    assert all(b["stream"] and b["stream_options"]["include_usage"] for b in bodies)
    assert all(b["messages"][-1]["role"] == "user" and b["messages"][-1]["content"] for b in bodies)
    assert len({b["messages"][-1]["content"] for b in bodies}) > 1


def test_the_bodies_of_mix_deal_its_tasks_with_their_own_fields_and_think_times(tmp_path):
    with start_truth(tmp_path / "truth.jsonl") as srv:
        lines = parsed(build_bodies(ROOT / "scenarios" / "mix.yaml", srv.base_url, 9, 4))
    bodies = [b for _, b in lines]
    # scenarios/mix.yaml: extraction sends a JSON Schema response_format at temperature 0.0;
    # summarization asks for 64 tokens of a 1,000-8,000-token document, without sampling fields
    extraction = [b for b in bodies if "response_format" in b]
    assert extraction and all(b["temperature"] == 0.0 and 64 <= b["max_tokens"] <= 192 for b in extraction)
    summaries = [b for b in bodies if "temperature" not in b and b["max_tokens"] == 64
                 and len(b["messages"][-1]["content"]) > 3000]
    assert summaries
    assert len(extraction) + len(summaries) < len(bodies)
    # multi_turn: 2-5 turns, one line each, every one followed by a think time of 0.5-2 s (between
    # turns, then after the conversation); the other tasks think 0 s
    thinks = [t for t, _ in lines if t > 0]
    assert thinks and all(0.5 <= t <= 2.0 for t in thinks)
    assert len(lines) > 36 and len(lines) - 36 <= len(thinks)


def test_the_file_holds_one_think_time_and_body_a_line(tmp_path):
    path = tmp_path / "bodies.jsonl"
    write_bodies(path, [b'0.000\t{"a":"x\\ny"}', b'1.250\t{"b":2}'])
    assert parsed(path.read_bytes().splitlines()) == [(0.0, {"a": "x\ny"}), (1.25, {"b": 2})]
