"""Prompt sources: deterministic, sized to the target, shaped per task kind, bounded counter use."""

import json
import random
import re
import statistics

import pytest

from tokenswarm.workload.prompts import HUGE_MAX_TOKENS, PromptSource, build_prompt_sources
from tokenswarm.workload.prompttypes import conversation_messages, conversation_text
from tokenswarm.workload.scenario import parse_scenario
from tokenswarm.workload.tokencount import EstimateCounter

_WORDS = re.compile(r"\s*(?:\w{1,8}|[^\w\s])|\s+")


class WordCounter:
    """A stand-in tokenizer that is NOT 4 chars/token (punctuation and long words split)."""

    name = "words"

    def __init__(self):
        self.calls = 0

    def count(self, text):
        self.calls += 1
        return len(_WORDS.findall(text))


def task(kind="qa", **cfg):
    return parse_scenario({"traffic": {"classes": {kind: cfg}}}).traffic.classes[0]


def content(p):
    return p.text if p.text is not None else p.messages[-1]["content"]


@pytest.mark.parametrize("kind", ["qa", "summarization", "code", "abnormal"])
def test_same_seed_and_rng_give_identical_prompts(kind):
    t = task(kind)
    a = PromptSource(t, WordCounter(), seed=11, pool_size=16)
    b = PromptSource(t, WordCounter(), seed=11, pool_size=16)
    ra, rb = random.Random("11:w0:u3"), random.Random("11:w0:u3")
    assert [a.next_prompt(ra) for _ in range(20)] == [b.next_prompt(rb) for _ in range(20)]
    other = [a.next_prompt(random.Random("11:w0:u4")) for _ in range(5)]
    assert other != [a.next_prompt(random.Random("11:w0:u3")) for _ in range(5)]


def test_conversations_are_deterministic():
    t = task("multi_turn")
    a, b = PromptSource(t, None, seed=5, pool_size=8), PromptSource(t, None, seed=5, pool_size=8)
    assert [a.conversation(random.Random(i)) for i in range(10)] == [
        b.conversation(random.Random(i)) for i in range(10)
    ]


@pytest.mark.parametrize(
    "kind, cfg",
    [
        ("qa", {}),
        ("summarization", {"document_tokens": {"dist": "uniform", "min": 1000, "max": 8000}}),
        ("code", {}),
        ("code", {"completion_share": 0.0}),
    ],
)
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_lengths_hit_the_target_against_a_non_4_char_counter(kind, cfg, api):
    counter = WordCounter()
    source = PromptSource(task(kind, **cfg), counter, seed=3, pool_size=32, api=api)
    rng = random.Random(99)
    ratios = []
    for _ in range(50 if kind == "summarization" else 150):  # summarization prompts are long to count
        p = source.next_prompt(rng)
        ratios.append(counter.count(content(p)) / p.target_prompt_tokens)
    assert abs(statistics.median(ratios) - 1) < 0.08
    q1, q3 = statistics.quantiles(ratios, n=4)[0], statistics.quantiles(ratios, n=4)[2]
    assert q1 > 0.75 and q3 < 1.3
    assert source.chars_per_token != pytest.approx(4.0, abs=0.05)  # it really calibrated


def test_estimate_counter_lengths_are_near_exact_for_long_prompts():
    counter = EstimateCounter()
    source = PromptSource(task("summarization"), counter, seed=1, pool_size=8)
    rng = random.Random(1)
    for _ in range(20):
        p = source.next_prompt(rng)
        assert abs(counter.count(content(p)) / p.target_prompt_tokens - 1) < 0.05


def test_calibration_uses_at_most_pool_size_counter_calls_and_none_per_request():
    counter = WordCounter()
    source = PromptSource(task("qa"), counter, seed=1, pool_size=10)
    assert counter.calls == 10 == source.calibration.samples
    assert source.calibration.counter == "words" and source.calibration.median_abs_error_pct < 30
    rng = random.Random(0)
    for _ in range(50):
        source.next_prompt(rng)
    assert counter.calls == 10


def test_prompt_targets_follow_the_distribution_and_max_tokens_the_output_dist():
    t = task(
        "qa",
        prompt_tokens={"dist": "uniform", "min": 100, "max": 200},
        max_tokens={"dist": "uniform", "min": 10, "max": 20},
    )
    source = PromptSource(t, None, seed=1, pool_size=4)
    rng = random.Random(2)
    ps = [source.next_prompt(rng) for _ in range(200)]
    assert {p.target_prompt_tokens for p in ps} <= set(range(100, 201))
    assert {p.max_tokens for p in ps} == set(range(10, 21))


def test_chat_prompts_are_message_lists_and_completion_prompts_are_text():
    chat = PromptSource(task("qa"), None, seed=1, pool_size=4, api="chat").next_prompt(random.Random(1))
    assert chat.text is None and chat.messages[0]["role"] == "user" and chat.messages[0]["content"]
    comp = PromptSource(task("qa"), None, seed=1, pool_size=4, api="completions").next_prompt(
        random.Random(1)
    )
    assert comp.messages is None and comp.text.endswith("Answer:")
    json.dumps(chat.messages)


def test_qa_prompt_asks_about_the_topic_of_its_excerpt():
    source = PromptSource(task("qa", prompt_tokens=300), None, seed=1, pool_size=4)
    p = source.next_prompt(random.Random(4))
    assert p.source.startswith("pydoc:topics/")
    assert "Question:" in content(p)


def test_summarization_prompt_has_instruction_and_long_document():
    source = PromptSource(
        task("summarization", document_tokens=3000, max_tokens=120), None, seed=1, pool_size=4
    )
    p = source.next_prompt(random.Random(1))
    text = content(p)
    assert text.startswith("Summarize the following document in about 90 words.")
    assert len(text) > 10_000 and p.max_tokens == 120 and p.source.startswith("pydoc:topics/")


def test_code_prompts_are_real_stdlib_source():
    from tokenswarm.workload.corpora import read_source

    source = PromptSource(task("code", completion_share=1.0), None, seed=2, pool_size=4, api="completions")
    p = source.next_prompt(random.Random(3))
    rel, line = p.source.removeprefix("stdlib:").rsplit(":", 1)
    assert read_source(rel).splitlines()[int(line) - 1] in p.text
    gen = PromptSource(task("code", completion_share=0.0), None, seed=2, pool_size=4).next_prompt(
        random.Random(3)
    )
    assert "Write the function below" in content(gen) and gen.source.startswith("stdlib:")


def test_a_conversation_draws_new_follow_ups_think_times_in_range_and_its_history_alternates():
    t = task(
        "multi_turn",
        turns={"dist": "uniform", "min": 2, "max": 4},
        think_time_s={"dist": "uniform", "min": 0.5, "max": 2},
        max_tokens=50,
    )
    source = PromptSource(t, WordCounter(), seed=1, pool_size=8)
    rng = random.Random(7)
    convs = [source.conversation(rng) for _ in range(40)]
    assert {c.turns for c in convs} == {2, 3, 4}
    for c in convs:
        assert all(c.user_message(i) for i in range(c.turns))
        assert len(set(c.user_messages)) == c.turns  # follow-ups are new messages
        assert c.think_time_s(0) == 0 and all(0.5 <= c.think_time_s(i) <= 2 for i in range(1, c.turns))
        assert all(c.max_tokens(i) == 50 for i in range(c.turns))
    c = convs[0]
    history = conversation_messages(c, 2 if c.turns > 2 else 1, ["reply 0", "reply 1"])
    assert [m["role"] for m in history][:3] == ["user", "assistant", "user"]
    assert history[1]["content"] == "reply 0" and history[-1]["content"] == c.user_message(len(history) // 2)
    assert conversation_text(c, 1, ["reply 0"]).endswith("Assistant:")
    with pytest.raises(ValueError):
        conversation_messages(c, 1, [])


def test_sharegpt_replay_for_multi_turn(tmp_path):
    data = [
        {
            "conversations": [
                {"from": "system", "value": "Be terse."},
                {"from": "human", "value": "Q1"},
                {"from": "gpt", "value": "A1"},
                {"from": "human", "value": "Q2"},
                {"from": "gpt", "value": "A2"},
                {"from": "human", "value": "Q3"},
            ]
        }
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    t = task("multi_turn", dataset={"path": str(path)}, turns=10)
    conv = PromptSource(t, None, seed=1, pool_size=4).conversation(random.Random(1))
    assert conv.user_messages == ("Q1", "Q2", "Q3") and conv.system == "Be terse."
    assert conversation_messages(conv, 1, ["real reply"])[0] == {"role": "system", "content": "Be terse."}
    capped = PromptSource(task("multi_turn", dataset={"path": str(path)}, turns=2), None, seed=1, pool_size=4)
    assert capped.conversation(random.Random(1)).user_messages == ("Q1", "Q2")


def test_jsonl_dataset_prompts_keep_their_max_tokens(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "alpha beta", "max_tokens": 7}\n{"messages": [{"role": "user", "content": "gamma"}]}\n'
    )
    t = task("qa", dataset={"path": str(path)}, max_tokens=33)
    chat = PromptSource(t, None, seed=1, pool_size=4)
    seen = {content(p): p.max_tokens for p in (chat.next_prompt(random.Random(i)) for i in range(30))}
    assert seen == {"alpha beta": 7, "gamma": 33}
    comp = PromptSource(t, None, seed=1, pool_size=4, api="completions")
    texts = {comp.next_prompt(random.Random(i)).text for i in range(30)}
    assert texts == {"alpha beta", "User: gamma\n\nAssistant:"}


def test_each_abnormal_case_draws_its_own_malformed_request():
    t = task(
        "abnormal",
        cases={"empty_prompt": 1, "huge_max_tokens": 1, "invalid_params": 1, "cancel_early": 1, "unicode": 1},
    )
    source = PromptSource(t, None, seed=1, pool_size=4)
    rng = random.Random(3)
    by_case = {}
    for _ in range(200):
        p = source.next_prompt(rng)
        by_case.setdefault(p.abnormal, p)
    assert set(by_case) == {"empty_prompt", "huge_max_tokens", "invalid_params", "cancel_early", "unicode"}
    assert content(by_case["empty_prompt"]) == ""
    assert by_case["huge_max_tokens"].max_tokens == HUGE_MAX_TOKENS
    assert by_case["invalid_params"].params["temperature"] < 0
    assert by_case["cancel_early"].source == "abnormal:cancel_early"
    only = PromptSource(task("abnormal", cases=["unicode"]), None, seed=1, pool_size=2)
    assert {only.next_prompt(rng).abnormal for _ in range(10)} == {"unicode"}


def test_build_prompt_sources_one_per_task():
    s = parse_scenario({"traffic": {"classes": {"qa": {}, "code": {"weight": 0}}}})
    sources = build_prompt_sources(s.traffic.classes, None, seed=s.traffic.seed, pool_size=4)
    assert set(sources) == {"qa", "code"} and sources["code"].task.kind == "code"


def test_unknown_api_is_rejected():
    with pytest.raises(ValueError):
        PromptSource(task("qa"), None, seed=1, api="grpc")


def test_an_extraction_source_reads_its_code_files_at_start_without_parsing_their_functions(monkeypatch):
    from tokenswarm.workload.corpora import builtin

    parsed = []
    real = builtin.documented_functions
    monkeypatch.setattr(builtin, "documented_functions", lambda rel: parsed.append(rel) or real(rel))
    src = PromptSource(task("extraction", response_format="json_schema"), None, seed=3, pool_size=8)
    assert len(src.code.files) == 64 and not parsed  # its documents are excerpts: no function list needed
    rng = random.Random(4)
    assert all(content(src.next_prompt(rng)) for _ in range(30)) and not parsed
    code = PromptSource(task("code"), None, seed=3, pool_size=8)
    assert sorted(parsed[: len(code.code.files)]) == sorted(code.code.files)  # code generation's, parsed before the run


def test_an_extraction_prompt_shows_its_schema_as_compact_json_and_asks_for_that_schema():
    from tokenswarm.workload.corpora.extraction import SCHEMAS

    src = PromptSource(task("extraction", response_format="json_schema"), None, seed=3, pool_size=8)
    rng = random.Random(5)
    seen = set()
    for _ in range(60):
        p = src.next_prompt(rng)
        spec = next(s for s in SCHEMAS if p.schema is s.schema)  # the shipped schema object itself
        seen.add(spec.name)
        assert json.dumps(spec.schema, separators=(",", ":")) in content(p)
        assert p.params["response_format"]["json_schema"] == {"name": spec.name, "schema": spec.schema, "strict": True}
        if spec.name == "contact_record":  # its notes name topics of the prose corpus
            assert re.search(r"note_0: the customer asked about .+ and wants an example\.", content(p))
    assert seen == {s.name for s in SCHEMAS}
