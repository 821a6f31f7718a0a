"""A scenario file's problems are reported all at once, with a "did you mean" for misspellings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tokenswarm import cli
from tokenswarm.workload.scenario import ScenarioError, ScenarioErrors, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]

BROKEN = {
    "target": {"timeouts": {"conect_s": 3}},
    "traffic": {"classes": {"qa": {"weight": 1}}},
    "load": {"stepz": [1, 2], "step_duration_s": -1},
    "slo": {"ttft_p95": 100},
}


def problems_of(data: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="s.yaml")
    return info.value


def test_every_unknown_field_and_each_sections_invalid_value_are_reported_together():
    err = problems_of(BROKEN)
    assert isinstance(err, ScenarioErrors)
    fields = [e.field for e in err.errors]
    assert fields == ["target.timeouts.conect_s", "load.stepz", "load.step_duration_s", "slo.ttft_p95"]
    text = str(err)
    assert text.splitlines()[0] == "s.yaml: 4 problems in the scenario:"
    for field in fields:
        assert f"s.yaml: {field}: " in text


def test_a_misspelled_field_gets_the_closest_known_name():
    err = problems_of(BROKEN)
    hints = {e.field: e.hint for e in err.errors}
    assert hints["target.timeouts.conect_s"] == "connect_s"
    assert hints["load.stepz"] == "steps"
    assert hints["slo.ttft_p95"] == "ttft_p95_ms"
    assert "(did you mean 'steps'?)" in str(err)


def test_a_name_close_to_nothing_known_gets_no_hint():
    err = problems_of({"traffic": {"classes": {"qa": {}}}, "colour": "blue"})
    assert not isinstance(err, ScenarioErrors)
    assert err.field == "colour" and err.hint is None and "did you mean" not in str(err)


def test_one_problem_is_a_plain_scenario_error_with_the_usual_message():
    err = problems_of({"traffic": {"classes": {"qa": {}}}, "load": {"mode": "closd"}})
    assert type(err) is ScenarioError
    assert str(err).startswith("s.yaml: load.mode: expected one of closed, open")


def test_a_valid_scenario_still_parses_after_a_broken_one():
    problems_of(BROKEN)  # the unknown-field collection must not leak into the next parse
    with pytest.raises(ScenarioError, match="load.stepz: unknown field"):
        parse_scenario({"traffic": {"classes": {"qa": {}}}, "load": {"stepz": [1]}}, source="t.yaml")
    assert parse_scenario({"traffic": {"classes": {"qa": {}}}}).load.steps == (1.0,)


def test_run_prints_every_problem_and_exits_2_before_sending_anything(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("traffic:\n  clases: {qa: {}}\nload:\n  stepz: [1]\n")
    assert cli.main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "traffic.clases: unknown field" in err and "(did you mean 'classes'?)" in err
    assert "load.stepz: unknown field" in err and "(did you mean 'steps'?)" in err


def _alias_bomb(levels: int = 9) -> str:
    """~1.3 KB of nested aliases under extra_body standing for 10**levels values."""
    lines = ["name: bomb", "target:", "  base_url: http://127.0.0.1:9", "  extra_body:",
             "    l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_at_once_naming_its_line(tmp_path):
    import time

    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert len(path.read_bytes()) < 1500
    t0 = time.monotonic()
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert time.monotonic() - t0 < 5.0  # once: 51 s and 6.1 GB; now milliseconds (generous bound)
    # the first value past the limit (100000): level 4, on line 9, stands for 10**5 scalars and its lists
    assert str(err.value).startswith(f"{path}: line 9, column 9: YAML aliases expand too far")


def test_a_recursive_alias_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\ntarget:\n  extra_body:\n    a: &a [1, *a]\n")
    with pytest.raises(ScenarioError, match=r"line 4, column 8: an alias refers to the value that contains it"):
        load_scenario(path)


def test_aliases_that_expand_modestly_still_load():
    from tokenswarm.workload.scenario.yamlsafe import load_bounded

    data = load_bounded(_alias_bomb(levels=3))
    assert data["target"]["extra_body"]["l1"] == [["x"] * 10] * 10


@pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="PyYAML built without libyaml")
@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_libyamls_parser_reads_every_shipped_scenario_as_the_pure_python_one_does(path):
    from tokenswarm.workload.scenario import yamlsafe

    assert yamlsafe.SAFE_LOADER is yaml.CSafeLoader  # the fast parser is the one in use
    text = path.read_text()
    assert yamlsafe.load_bounded(text) == yaml.load(text, Loader=yaml.SafeLoader)
    assert yamlsafe.load_plain(text) == yaml.load(text, Loader=yaml.SafeLoader)


@pytest.mark.parametrize("value, expected", [("[96]", [96]), ("null", None), ("{}", {}), ("0.5", 0.5),
                                             ("'8'", "8"), ("yes", True), ("{a: [1, 2]}", {"a": [1, 2]})])
def test_a_set_value_is_read_as_yaml_safe_load_reads_it(value, expected):
    from tokenswarm.workload.scenario.parse import parse_override

    assert parse_override(f"load.steps={value}") == ("load.steps", expected)
    assert expected == yaml.safe_load(value)
