"""The prompt-sizing flag judges only prompts tokenswarm sized: a dataset's prompts are sent as they are."""

from __future__ import annotations

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.sent import requested_prompt_mean, what_was_sent
from tokenswarm.analysis.step_windows import windows

# What Scenario.resolved() writes for a dataset class: the kind's default prompt_tokens is
# listed though nothing drew from it (the prompts come from the file), and no requested mean.
_SCENARIO = {"traffic": {"classes": {
    "chat": {"kind": "qa", "prompt_tokens": {"dist": "fixed", "value": 40},
             "dataset": {"path": "/data/prompts.jsonl", "format": "jsonl"},
             "requested_mean_tokens": {"max_tokens": 16.0}},
    "qa": {"kind": "qa", "prompt_tokens": {"dist": "fixed", "value": 40},
           "requested_mean_tokens": {"prompt_tokens": 40.0, "max_tokens": 16.0}},
}}}


def _run(tmp_path):
    steps = [step(0, "concurrency", 1, T0, T0 + 1, T0 + 300)]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 2 + i, prompt_tokens=300,
                   task="chat" if i % 2 else "qa") for i in range(200)]
    return load_run(write_run(tmp_path / "run", recs, steps=steps, scenario=_SCENARIO, ended_at=T0 + 300))


def test_a_dataset_task_has_no_requested_prompt_length():
    from tokenswarm.manifest import RunManifest

    m = RunManifest.from_json({"format_version": 3, "run_id": "r", "scenario": _SCENARIO})
    assert requested_prompt_mean(m, "chat") is None
    assert requested_prompt_mean(m, "qa") == 40


def test_dataset_prompts_far_from_the_default_length_are_not_flagged_but_sized_ones_are(tmp_path):
    run = _run(tmp_path)
    rows = {r["task"]: r for r in what_was_sent(run, windows(run)[0])}
    chat, qa = rows["chat"], rows["qa"]
    assert chat["prompt_sizing_suspect"] is False, "sent as the file has it: nothing the user can fix"
    assert chat["requested_prompt_mean_tokens"] is None and chat["prompt_counted_to_requested_ratio"] is None
    assert chat["counted_prompt_mean_tokens"] == 300, "the server-counted size is still reported"
    assert qa["prompt_sizing_suspect"] is True, "7.5x the requested length: still a sizing problem"
