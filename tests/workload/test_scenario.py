"""Scenario files: every shipped file loads; every kind of mistake gives file + field + expectation."""

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from tokenswarm.workload.scenario import (
    SLO_NAMES,
    Scenario,
    ScenarioError,
    load_scenario,
    parse_override,
    parse_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SHIPPED = sorted(SCENARIOS.glob("*.yaml"))

MINIMAL = {"traffic": {"classes": {"qa": {}}}}


def with_(base: dict, dotted: str, value) -> dict:
    data = json.loads(json.dumps(base))
    node = data
    *parents, last = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return data


def error_of(data: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "s.yaml")
    return info.value


def test_every_required_scenario_is_shipped():
    names = {p.name for p in SHIPPED}
    for required in (
        "qa",
        "summarization",
        "code",
        "multi_turn",
        "mix",
        "sweep-concurrency",
        "sweep-rate",
        "soak",
        "spec-baseline",
        "spec-candidate",
    ):
        assert f"{required}.yaml" in names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenario_loads_and_resolves_to_json(path):
    s = load_scenario(path)
    assert isinstance(s, Scenario)
    assert s.name == path.stem
    assert s.description
    assert sum(t.weight for t in s.traffic.classes) > 0
    json.dumps(s.resolved())  # JSON-able


def test_mix_is_the_short_default_demo():
    s = load_scenario(SCENARIOS / "mix.yaml")
    assert {t.kind for t in s.traffic.classes} == {"qa", "summarization", "code", "multi_turn", "extraction"}
    assert s.load.mode == "closed"
    runtime_s = len(s.load.steps) * (s.load.warmup_s + s.load.step_duration_s)
    assert runtime_s <= 90


def test_spec_pair_has_identical_traffic_and_load():
    a = load_scenario(SCENARIOS / "spec-baseline.yaml").resolved()
    b = load_scenario(SCENARIOS / "spec-candidate.yaml").resolved()
    assert a["traffic"] == b["traffic"] and a["load"] == b["load"] and a["target"] == b["target"]
    assert a["traffic"]["keep_outputs"] is True
    assert all(c["sampling"]["temperature"] == 0.0 for c in a["traffic"]["classes"].values())
    assert a["name"] != b["name"]


def test_soak_and_rate_sweep_shapes():
    soak = load_scenario(SCENARIOS / "soak.yaml")
    assert len(soak.load.steps) == 1 and soak.load.step_duration_s == 4 * 3600
    assert soak.load.report_interval_s == 300
    rate = load_scenario(SCENARIOS / "sweep-rate.yaml")
    assert rate.load.mode == "open" and rate.load.arrival == "poisson" and len(rate.load.steps) >= 4
    conc = load_scenario(SCENARIOS / "sweep-concurrency.yaml")
    assert conc.load.steps == (1, 4, 8, 16, 32, 64)


def test_defaults_of_a_minimal_scenario():
    s = parse_scenario(MINIMAL, "<test>")
    t = s.target
    assert (t.base_url, t.api, t.model, t.api_key_env) == (None, "chat", "auto", None)
    assert t.metrics_url is None and t.metrics_endpoint("http://h:1/v1") == "http://h:1/metrics"
    qa = s.traffic.classes[0]
    assert qa.kind == "qa" and qa.weight == 1.0 and qa.sampling.params() == {}
    assert s.load.mode == "closed" and s.cost is None and s.slo.overall == {}


def test_custom_class_with_kind_and_sampling_inheritance():
    data = {
        "traffic": {
            "sampling": {"temperature": 0.0, "seed": 3},
            "classes": {
                "support_bot": {"kind": "qa", "weight": 2, "sampling": {"top_p": 0.9, "stop": "###"}}
            },
        }
    }
    task = parse_scenario(data).traffic.task("support_bot")
    assert task.kind == "qa"
    assert task.sampling.params() == {"temperature": 0.0, "top_p": 0.9, "seed": 3, "stop": ["###"]}


def test_target_resolution_and_secret_masking(monkeypatch):
    data = {
        "target": {
            "base_url": "http://127.0.0.1:8000/v1/",
            "api_key_env": "TS_TEST_KEY",
            "headers": {"Authorization": "Bearer abc", "X-Api-Key": "k", "X-Team": "perf"},
            "extra_metrics": [{"name": "gpu", "url": "http://127.0.0.1:9400/metrics"}],
        },
        **MINIMAL,
    }
    s = parse_scenario(data)
    assert s.target.base_url == "http://127.0.0.1:8000"
    assert s.target.metrics_url == "http://127.0.0.1:8000/metrics"
    assert s.target.metrics_endpoint("http://other:9") == "http://other:9/metrics"
    assert s.target.extra_metrics == (("gpu", "http://127.0.0.1:9400/metrics"),)
    monkeypatch.delenv("TS_TEST_KEY", raising=False)
    assert s.target.api_key() is None
    monkeypatch.setenv("TS_TEST_KEY", "sk-secret")
    assert s.target.api_key() == "sk-secret"
    resolved = json.dumps(s.resolved())
    assert "Bearer abc" not in resolved and "sk-secret" not in resolved
    assert s.resolved()["target"]["headers"] == {"Authorization": "***", "X-Api-Key": "***", "X-Team": "perf"}


def test_a_null_metrics_url_turns_scraping_off_and_an_explicit_one_is_used_as_given():
    off = parse_scenario(with_(MINIMAL, "target.metrics_url", None))
    assert off.target.metrics_endpoint("http://h:1") is None
    explicit = parse_scenario(with_(MINIMAL, "target.metrics_url", "http://m:2/prom"))
    assert explicit.target.metrics_endpoint("http://h:1") == "http://m:2/prom"


def test_durations_accept_units():
    s = parse_scenario(with_(with_(MINIMAL, "load.step_duration_s", "10m"), "load.warmup_s", "90s"))
    assert (s.load.step_duration_s, s.load.warmup_s) == (600.0, 90.0)


def test_overrides_are_applied_before_validation(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"target": {"base_url": "http://a:1"}, **MINIMAL}))
    s = load_scenario(f, {"target.base_url": "http://b:2", "load.steps": [4], "slo.ttft_p95_ms": 500})
    assert (
        s.target.base_url == "http://b:2" and s.load.steps == (4.0,) and s.slo.overall == {"ttft_p95_ms": 500}
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(f, {"load.mode": "sideways"})
    assert str(info.value) == f"{f}: load.mode: expected one of closed, open, replay, search, sweep, got 'sideways'"


def test_an_override_splits_its_dotted_key_from_a_yaml_value_and_needs_an_equals_sign():
    assert parse_override("load.steps=[4, 8]") == ("load.steps", [4, 8])
    assert parse_override("target.base_url=http://x:1") == ("target.base_url", "http://x:1")
    with pytest.raises(ValueError):
        parse_override("load.steps")


@pytest.mark.parametrize(
    "dotted, value, field, expected",
    [
        ("target.api", "grpc", "target.api", "one of chat, completions"),
        ("target.base_url", "localhost:8000", "target.base_url", "an http:// or https:// URL"),
        ("target.verify_tls", "yes", "target.verify_tls", "true or false"),
        ("target.keep_alive", "off", "target.keep_alive", "true or false"),
        ("target.timeouts", {"connect_s": -1}, "target.timeouts.connect_s", "a number > 0"),
        (
            "target.timeouts",
            {"ttft_s": 1},
            "target.timeouts.ttft_s",
            "unknown field, expected one of connect_s",
        ),
        ("target.headers", {"X-N": 5}, "target.headers.X-N", "a string header value"),
        (
            "target.extra_metrics",
            [{"name": "target", "url": "http://x"}],
            "target.extra_metrics[0].name",
            "a unique name",
        ),
        ("target.api_key_env", "OPENAI-KEY!", "target.api_key_env", "an environment variable name"),
        ("traffic.seed", 1.5, "traffic.seed", "an integer"),
        ("traffic.keep_outputs", 1, "traffic.keep_outputs", "true or false"),
        ("traffic.classes", {}, "traffic.classes", "a mapping of task name"),
        ("traffic.classes", {"qa": {"weight": -1}}, "traffic.classes.qa.weight", "a number >= 0"),
        (
            "traffic.classes",
            {"qa": {"weight": 0}, "code": {"weight": 0}},
            "traffic.classes",
            "at least one class with weight > 0",
        ),
        ("traffic.classes", {"bot": {"weight": 1}}, "traffic.classes.bot.kind", "one of qa, summarization"),
        (
            "traffic.classes",
            {"qa": {"prompt_tokens": {"dist": "zipf"}}},
            "traffic.classes.qa.prompt_tokens.dist",
            "one of fixed, uniform, normal, lognormal",
        ),
        (
            "traffic.classes",
            {"qa": {"max_tokens": {"dist": "uniform", "min": 9, "max": 3}}},
            "traffic.classes.qa.max_tokens.min",
            "min <= max",
        ),
        ("traffic.classes", {"qa": {"turns": 3}}, "traffic.classes.qa.turns", "unknown field"),
        (
            "traffic.classes",
            {"summarization": {"prompt_tokens": 9}},
            "traffic.classes.summarization.prompt_tokens",
            "document_tokens",
        ),
        (
            "traffic.classes",
            {"qa": {"sampling": {"max_tokens": 9}}},
            "traffic.classes.qa.sampling.max_tokens",
            "max_tokens on the class",
        ),
        (
            "traffic.classes",
            {"qa": {"sampling": {"top_p": 1.5}}},
            "traffic.classes.qa.sampling.top_p",
            "a number <= 1",
        ),
        (
            "traffic.classes",
            {"qa": {"sampling": {"temperature": "hot"}}},
            "traffic.classes.qa.sampling.temperature",
            "a number",
        ),
        (
            "traffic.classes",
            {"qa": {"dataset": {"path": "/nonexistent/x.jsonl"}}},
            "traffic.classes.qa.dataset.path",
            "an existing dataset file",
        ),
        (
            "traffic.classes",
            {"abnormal": {"cases": {"explode": 1}}},
            "traffic.classes.abnormal.cases.explode",
            "unknown field",
        ),
        ("traffic.tokenizer", "/nonexistent/tokenizer.json", "traffic.tokenizer", "a tokenizer.json file"),
        ("load.mode", "open", "load.steps[0]", "a positive request rate"),
        ("load.steps", [0.5], "load.steps[0]", "a whole number of users >= 1"),
        ("load.steps", [], "load.steps", "a non-empty list"),
        ("load.arrival", "bursty", "load.arrival", "one of poisson, gamma, constant"),
        ("load.burstiness", 0.5, "load.burstiness", "1.0 unless arrival is gamma"),
        ("load.step_duration_s", "forever", "load.step_duration_s", "a duration like"),
        ("load.max_in_flight", 0, "load.max_in_flight", "an integer >= 1"),
        ("slo.ttft_p90_ms", 5, "slo.ttft_p90_ms", "unknown field, expected one of " + ", ".join(SLO_NAMES)),
        ("slo.error_rate", 5, "slo.error_rate", "a number <= 1"),
        (
            "slo.per_task",
            {"nope": {"ttft_p95_ms": 1}},
            "slo.per_task.nope",
            "a task name from traffic.classes",
        ),
        ("cost", {"gpus": 2}, "cost.gpu_hour_usd", "a number > 0"),
        ("colour", "blue", "colour", "unknown field, expected one of name, description, target"),
    ],
)
def test_validation_errors_name_file_field_and_expectation(dotted, value, field, expected):
    base = MINIMAL if dotted != "load.mode" else with_(MINIMAL, "load.steps", [0])
    err = error_of(with_(base, dotted, value))
    assert err.file == "s.yaml"
    assert err.field == field
    assert str(err).startswith(f"s.yaml: {field}: ")
    assert expected in str(err)


def test_open_mode_with_positive_rates_is_valid():
    s = parse_scenario(with_(with_(MINIMAL, "load.mode", "open"), "load.steps", [0.5, 2]))
    assert s.load.steps == (0.5, 2.0)


@pytest.mark.parametrize("where", ["target", ""])
def test_literal_api_key_is_rejected_without_echoing_it(where):
    data = with_(MINIMAL, f"{where}.api_key" if where else "api_key", "sk-live-0123456789")
    err = error_of(data)
    assert "api_key_env" in str(err) and "literal API key" in str(err)
    assert "sk-live" not in str(err)


def test_key_looking_api_key_env_is_rejected():
    err = error_of(with_(MINIMAL, "target.api_key_env", "sk-proj-abcdefghijklmnop"))
    assert err.field == "target.api_key_env" and "sk-proj" not in str(err)


def test_a_missing_scenario_file_is_refused_naming_its_path(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "nope.yaml")
    assert str(info.value).startswith(str(tmp_path / "nope.yaml"))
    assert "an existing scenario file" in str(info.value)


def test_invalid_yaml_names_the_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        textwrap.dedent("""\
        name: bad
        traffic:
          classes:
            qa: {weight: 1
        load:
          mode: closed
        """)
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert str(info.value).startswith(f"{f}: line ")
    assert info.value.field.startswith("line 5") or info.value.field.startswith("line 4")
    assert "valid YAML" in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert "a mapping" in str(info.value)


def test_dataset_paths_resolve_relative_to_the_scenario_and_are_validated(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n{"prompt": 3}\n')
    f = tmp_path / "s.yaml"
    f.write_text(
        yaml.safe_dump({"traffic": {"classes": {"bot": {"kind": "qa", "dataset": {"path": "data/p.jsonl"}}}}})
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert str(info.value).startswith(f"{tmp_path / 'data' / 'p.jsonl'}: line 2: ")
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    s = load_scenario(f)
    assert s.traffic.task("bot").dataset.path == str(tmp_path / "data" / "p.jsonl")


def test_tokenizer_named_but_package_missing(tmp_path, monkeypatch):
    import builtins

    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    real_import = builtins.__import__

    def no_tokenizers(name, *a, **kw):
        if name == "tokenizers":
            raise ImportError("no tokenizers")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    err = error_of(with_(MINIMAL, "traffic.tokenizer", str(tok)))
    assert err.field == "traffic.tokenizer" and "pip install tokenizers" in str(err)


def test_the_old_slo_key_min_output_tps_still_loads_with_a_warning_naming_the_file_and_the_new_key(tmp_path):
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump({**MINIMAL, "slo": {"min_output_tps": 100, "per_task": {}}}))
    with pytest.warns(FutureWarning, match=rf"{f}: slo.min_output_tps: .*write 'min_output_tokens_per_s'"):
        s = load_scenario(f)
    assert s.slo.overall == {"min_output_tokens_per_s": 100}


def test_target_limits_default_bound_each_response_and_can_be_set():
    from tokenswarm.workload.scenario import ScenarioError, parse_scenario

    classes = {"traffic": {"classes": {"qa": {}}}}
    t = parse_scenario(classes).target
    assert (t.output_tokens_factor, t.max_response_bytes) == (4.0, 32 * 1024 * 1024)
    sc = parse_scenario({"target": {"limits": {"output_tokens_factor": 1.5, "response_bytes": 4096}}, **classes})
    assert sc.resolved()["target"]["limits"] == {"output_tokens_factor": 1.5, "response_bytes": 4096}
    with pytest.raises(ScenarioError, match=r"target\.limits\.response_bytes: expected an integer >= 1024, got 10"):
        parse_scenario({"target": {"limits": {"response_bytes": 10}}, **classes})
    with pytest.raises(ScenarioError, match=r"target\.limits\.output_tokens_factor: expected a number >= 1"):
        parse_scenario({"target": {"limits": {"output_tokens_factor": 0.5}}, **classes})
