"""A step the run stopped in is labelled partial in the tables, and its cancelled requests are not errors."""

import pytest

from tests.analysis.runfactory import T0, failed, record, step, write_run
from tokenswarm.analysis import load_run, step_table
from tokenswarm.manifest import LoadStep, ManifestError, RunManifest


def test_the_step_a_run_stopped_in_is_labelled_partial_and_its_cancelled_requests_are_not_errors(tmp_path):
    steps = [step(0, "concurrency", 2, T0, T0 + 1, T0 + 30),
             {**step(1, "concurrency", 8, T0 + 30, T0 + 31, T0 + 40), "partial": True}]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 2 + i) for i in range(20)]
    recs += [record(100 + i, step=1, phase="steady", sent_at_s=T0 + 32 + i * 0.5) for i in range(10)]
    recs += [failed(200 + i, outcome="cancelled", step=1, phase="steady", sent_at_s=T0 + 39) for i in range(8)]
    t = step_table(load_run(write_run(tmp_path / "run", recs, steps=steps, stop_reason="sigterm", complete=False)))
    full, cut = t.row(0), t.row(1)
    assert full["step_name"] == "c2" and cut["step_name"] == "c8 (partial)"
    assert cut["cancelled_count"] == 8 and cut["ok_count"] == 10
    assert cut["error_rate"] == 0.0 and cut["failed_count"] == 0, "cancelled: not a success, not a server error"
    assert any("c8 is partial" in n and "sigterm" in n for n in t.notes)


def test_the_manifest_keeps_the_stop_reason_and_the_partial_flag_and_old_manifests_read_as_not_partial():
    m = RunManifest(run_id="r", stop_reason="max_run_time",
                    steps=(LoadStep(0, "c2", "concurrency", 2.0, partial=True),))
    back = RunManifest.from_json(m.to_json())
    assert back.stop_reason == "max_run_time" and back.steps[0].partial
    old = {k: v for k, v in m.to_json().items() if k != "stop_reason"}
    old["steps"] = [{k: v for k, v in s.items() if k != "partial"} for s in old["steps"]]
    legacy = RunManifest.from_json(old)
    assert legacy.stop_reason is None and not legacy.steps[0].partial and "partial" not in legacy.extra
    with pytest.raises(ManifestError, match=r"steps\[0\].partial: expected true or false, got 'yes'"):
        RunManifest.from_json({**old, "steps": [{**old["steps"][0], "partial": "yes"}]})
