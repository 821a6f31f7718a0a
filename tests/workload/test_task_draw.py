"""``traffic.task_draw: per_request``: one closed-loop user sends the whole mix by weight."""

import pytest

from tests.helpers.runs import run_on_sim, scenario_file
from tokenswarm.workload.scenario import ScenarioError, load_scenario

TRAFFIC = {
    "seed": 5, "task_draw": "per_request",
    "classes": {
        "qa": {"weight": 3, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 60},
               "max_tokens": {"dist": "fixed", "value": 8}},
        "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 200, "max": 300},
                 "max_tokens": {"dist": "fixed", "value": 8}},
    },
}


def test_task_draw_defaults_to_per_user_and_rejects_unknown_values_naming_the_field(tmp_path):
    per_user = {k: v for k, v in TRAFFIC.items() if k != "task_draw"}
    assert load_scenario(str(scenario_file(tmp_path, traffic=per_user))).traffic.task_draw == "per_user"
    bad = scenario_file(tmp_path, traffic={**TRAFFIC, "task_draw": "sometimes"})
    with pytest.raises(ScenarioError, match=r"traffic\.task_draw.*per_user, per_request"):
        load_scenario(str(bad))


def test_the_resolved_scenario_in_the_manifest_names_the_draw(tmp_path):
    sc = load_scenario(str(scenario_file(tmp_path, traffic=TRAFFIC)))
    assert sc.resolved()["traffic"]["task_draw"] == "per_request"


@pytest.mark.slow
def test_a_single_user_draws_every_task_by_weight(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC,
                       load={"mode": "closed", "steps": [1], "warmup_s": 0.2, "step_duration_s": 4,
                             "stop_timeout_s": 5})
    records, _ = run_on_sim(sc, tmp_path / "run")
    tasks = [r["task"] for r in records]
    assert {r["user_class"] for r in records} == {"MixedUser"}
    assert set(tasks) == {"qa", "code"}, f"one user at concurrency 1 sent only {set(tasks)}"
    # weight 3:1 -> about 75 % Q&A; 0.5..0.95 is a loose band over the few dozen requests sent
    assert 0.5 < tasks.count("qa") / len(tasks) < 0.95, (tasks.count("qa"), len(tasks))


@pytest.mark.slow
@pytest.mark.timing
def test_a_mixed_user_sends_its_next_request_as_soon_as_the_last_one_ends(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC,
                       load={"mode": "closed", "steps": [1], "warmup_s": 0.2, "step_duration_s": 3,
                             "stop_timeout_s": 5})
    records = sorted(run_on_sim(sc, tmp_path / "run")[0], key=lambda r: r["sent_at_s"])
    gaps = [b["sent_at_s"] - (a["sent_at_s"] + a["e2e_ms"] / 1000) for a, b in zip(records, records[1:])]
    # think time is 0: an idle gap of 0.5 s (tolerance for a shared, busy machine) means the user slept
    assert max(gaps) < 0.5, f"largest idle gap between requests {max(gaps):.2f} s (tolerance 0.5 s)"
