"""Requested and observed lengths are named apart: a scenario class's ``max_tokens`` (requested,
sent as each request's max_tokens) vs the record's ``output_tokens`` (what the server counted).
The old scenario name still works with a warning; runs of format version 2 are still read."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import analyse, load_run
from tokenswarm.analysis.sent import requested_prompt_mean
from tokenswarm.manifest import RunManifest
from tokenswarm.record import FORMAT_VERSION, READABLE_FORMAT_VERSIONS
from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario import parse

ROOT = Path(__file__).resolve().parents[1]
_FIXED = {"dist": "fixed", "value": 24}


def test_a_class_max_tokens_is_the_distribution_each_request_max_tokens_is_drawn_from():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns about nothing
        sc = parse.parse_scenario({"traffic": {"classes": {"qa": {"max_tokens": _FIXED}}}}, "s.yaml")
    (task,) = sc.traffic.classes
    assert task.max_tokens.spec == _FIXED and task.max_tokens.mean == 24


def test_the_old_name_output_tokens_still_works_and_warns_naming_the_file_and_the_field():
    with pytest.warns(FutureWarning, match=r"s\.yaml: traffic\.classes\.qa\.output_tokens: .*write 'max_tokens'"):
        sc = parse.parse_scenario({"traffic": {"classes": {"qa": {"output_tokens": _FIXED}}}}, "s.yaml")
    assert sc.traffic.classes[0].max_tokens.spec == _FIXED


def test_setting_both_names_is_an_error_naming_the_old_field():
    with pytest.raises(ScenarioError, match=r"traffic\.classes\.qa\.output_tokens: .*both output_tokens and max_tokens"):
        parse.parse_scenario({"traffic": {"classes": {"qa": {"output_tokens": _FIXED, "max_tokens": _FIXED}}}},
                             "s.yaml")


def test_the_scenario_echo_names_the_requested_lengths_max_tokens_and_carries_their_means():
    sc = parse.parse_scenario({"traffic": {"classes": {
        "qa": {"max_tokens": _FIXED, "prompt_tokens": {"dist": "uniform", "min": 10, "max": 30}},
        "summarization": {"max_tokens": _FIXED, "document_tokens": {"dist": "fixed", "value": 500}},
    }}}, "s.yaml")
    classes = sc.resolved()["traffic"]["classes"]
    assert "output_tokens" not in classes["qa"] and classes["qa"]["max_tokens"] == _FIXED
    assert classes["qa"]["requested_mean_tokens"] == {"prompt_tokens": 20.0, "max_tokens": 24.0}
    assert classes["summarization"]["requested_mean_tokens"] == {"prompt_tokens": 500.0, "max_tokens": 24.0}


def test_the_format_version_was_bumped_and_version_2_is_still_readable():
    assert FORMAT_VERSION == 3 and READABLE_FORMAT_VERSIONS == (1, 2, 3)


def test_a_version_2_manifest_reads_its_classes_output_tokens_as_max_tokens():
    old = {"format_version": 2, "run_id": "r", "scenario": {"traffic": {"classes": {
        "qa": {"kind": "qa", "output_tokens": _FIXED, "prompt_tokens": {"dist": "fixed", "value": 40}}}}}}
    qa = RunManifest.from_json(old).scenario_dict["traffic"]["classes"]["qa"]
    assert qa["max_tokens"] == _FIXED and "output_tokens" not in qa
    # version 3 is taken as written: a class field called output_tokens there is not renamed
    new = {**old, "format_version": 3}
    assert "output_tokens" in RunManifest.from_json(new).scenario_dict["traffic"]["classes"]["qa"]


def _scenario_echo(version: int) -> dict:
    qa = {"kind": "qa", "prompt_tokens": {"dist": "fixed", "value": 40}}
    if version >= 3:
        return {"traffic": {"classes": {"qa": {**qa, "max_tokens": _FIXED,
                                               "requested_mean_tokens": {"prompt_tokens": 40.0, "max_tokens": 24.0}}}}}
    return {"traffic": {"classes": {"qa": {**qa, "output_tokens": _FIXED}}}}


@pytest.mark.parametrize("version", [2, FORMAT_VERSION])
def test_runs_of_version_2_and_of_today_are_analysed_and_print_what_was_sent(tmp_path, version):
    steps = [step(0, "concurrency", 1, T0, T0 + 1, T0 + 300)]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 2 + i, prompt_tokens=42, max_tokens=24)
            for i in range(50)]
    run = load_run(write_run(tmp_path / "run", recs, steps=steps, scenario=_scenario_echo(version),
                             format_version=version, ended_at=T0 + 300))
    assert run.manifest.format_version == version
    (sent,) = analyse(run)["sent"]
    assert sent["max_tokens_mean_tokens"] == 24 and sent["output_p50_tokens"] == 4  # requested vs counted
    # today's manifest states the requested prompt mean; a version-2 manifest did not, so no ratio
    assert sent["requested_prompt_mean_tokens"] == (40.0 if version >= 3 else None)
    assert requested_prompt_mean(run.manifest, "qa") == sent["requested_prompt_mean_tokens"]


def test_the_analysis_of_what_was_sent_uses_no_generator_code():
    tree = ast.parse((ROOT / "analysis" / "sent.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("tokenswarm.workload")}, imported
