"""The run manifest as a typed value: what the controller writes is what the analysis reads."""

from __future__ import annotations

import json

import pytest

from tests.analysis.runfactory import manifest as legacy_manifest
from tests.analysis.runfactory import step as legacy_step
from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.loader import read_manifest
from tokenswarm.collect.manifest import ManifestFile, new_manifest
from tokenswarm.manifest import LoadStep, ManifestError, RunManifest, RunTarget, Totals
from tokenswarm.record import FORMAT_VERSION

T0 = 1_764_480_000.0


def a_manifest() -> RunManifest:
    return RunManifest(
        run_id="run-1", tokenswarm_version="0.1.0", command=("tokenswarm", "run", "mix"), scenario_name="mix",
        scenario={"name": "mix", "load": {"mode": "closed"}}, load_mode="closed", started_at=T0, ended_at=T0 + 60,
        target=RunTarget(base_url="http://127.0.0.1:8000", api="chat", model="sim", server_headers={"server": "x"}),
        steps=(LoadStep(0, "c1", "concurrency", 1, T0, T0 + 5, T0 + 30),
               LoadStep(1, "c4", "concurrency", 4, T0 + 30, T0 + 35, T0 + 60)),
        workers=({"worker_id": "w0", "lost_reason": None},),
        totals=Totals(requests_started=10, records_received=10), warnings=("a warning",), complete=True)


def test_a_manifest_survives_its_json_round_trip_unchanged():
    m = a_manifest()
    assert RunManifest.from_json(json.loads(json.dumps(m.to_json()))) == m


def test_what_the_writer_writes_the_loader_reads_back_as_the_same_value(tmp_path):
    f = ManifestFile(tmp_path, new_manifest("run-2", scenario={"name": "qa"}, scenario_name="qa",
                                            command=["tokenswarm"], load_mode="open", started_at=T0))
    f.start_step(0, "r2", "rate", 2.0, at=T0 + 1)
    f.mark_last_step(steady_at=T0 + 6)
    f.start_step(1, "r4", "rate", 4.0, at=T0 + 20)  # ends the open step
    f.close_open_steps(T0 + 40)
    f.warn("twice")
    f.warn("twice")
    f.write()
    back = read_manifest(tmp_path)
    assert back == f.current
    assert [(s.started_at, s.steady_at, s.ended_at) for s in back.steps] == [
        (T0 + 1, T0 + 6, T0 + 20), (T0 + 20, None, T0 + 40)]
    assert back.warnings == ("twice",)


def test_an_older_manifest_without_optional_keys_reads_with_the_defaults(tmp_path):
    old = {"format_version": FORMAT_VERSION, "run_id": "old",
           "steps": [{"index": 0, "kind": "concurrency", "target": 2, "steady_at": T0}]}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    m = read_manifest(tmp_path)
    assert m.records_store.format == "jsonl" and m.totals == Totals() and m.target == RunTarget()
    assert m.steps == (LoadStep(0, "0", "concurrency", 2.0, None, T0, None),)
    assert m.workers == () and m.warnings == () and not m.complete and m.scenario_dict == {}


def test_the_analysis_tests_hand_made_manifests_still_read():
    raw = legacy_manifest(steps=[legacy_step(0, "rate", 2.0, T0, T0 + 5, T0 + 50)])
    m = RunManifest.from_json(raw)
    assert m.steps[0].kind == "rate" and m.steps[0].ended_at == T0 + 50


def test_keys_this_version_does_not_know_are_kept_through_a_rewrite():
    raw = {**a_manifest().to_json(), "added_by_a_newer_writer": {"x": 1}}
    m = RunManifest.from_json(raw)
    assert m.extra == {"added_by_a_newer_writer": {"x": 1}}
    assert m.to_json()["added_by_a_newer_writer"] == {"x": 1}


@pytest.mark.parametrize(("change", "message"), [
    ({"steps": [{"index": 0, "kind": "concurrency", "target": "ten"}]},
     r"manifest.json: steps\[0\].target: expected a number, got 'ten'"),
    ({"steps": [{"index": 0, "kind": "users", "target": 1}]},
     r"manifest.json: steps\[0\].kind: expected one of concurrency, rate, got 'users'"),
    ({"steps": {"index": 0}}, r"manifest.json: steps: expected a list, got dict"),
    ({"run_id": None}, r"manifest.json: run_id: expected a string, got None"),
    ({"started_at": "yesterday"}, r"manifest.json: started_at: expected a number, got 'yesterday'"),
    ({"totals": {"records_lost": 1.5}}, r"manifest.json: totals.records_lost: expected an integer, got 1.5"),
    ({"target": {"model": 3}}, r"manifest.json: target.model: expected a string, got 3"),
    ({"complete": "yes"}, r"manifest.json: complete: expected true or false, got 'yes'"),
    ({"format_version": 99}, r"manifest.json: unknown format_version 99"),
])
def test_a_wrong_field_is_an_error_naming_the_file_and_the_field(tmp_path, change, message):
    (tmp_path / "manifest.json").write_text(json.dumps({**a_manifest().to_json(), **change}))
    with pytest.raises(RunInputError, match=message):
        read_manifest(tmp_path)


def test_from_json_without_a_file_names_the_field_alone():
    with pytest.raises(ManifestError, match=r"^steps\[1\].index: expected an integer"):
        RunManifest.from_json({**a_manifest().to_json(), "steps": [
            {"index": 0, "kind": "rate", "target": 1}, {"index": "1", "kind": "rate", "target": 1}]})


def test_the_manifest_value_is_frozen():
    m = a_manifest()
    with pytest.raises(AttributeError):
        m.run_id = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.steps[0].ended_at = 0.0  # type: ignore[misc]


def test_refused_workers_round_trip_and_a_manifest_without_them_writes_no_key():
    refused = ({"worker": "rogue-1", "reason": "wrong worker token", "messages_dropped": 7,
                "record_batches_dropped": 3},)
    m = RunManifest(run_id="r1", workers_refused=refused)
    assert RunManifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    plain = RunManifest(run_id="r2").to_json()
    assert "workers_refused" not in plain and RunManifest.from_json(plain).workers_refused == ()
    with pytest.raises(ManifestError, match=r"workers_refused\[0\]"):
        RunManifest.from_json({**plain, "workers_refused": ["rogue"]})
