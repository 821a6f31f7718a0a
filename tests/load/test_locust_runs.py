"""Real Locust runs against the simulator: records checked field by field against the
simulator's ground-truth log (what it actually sent, and when)."""

import statistics

import numpy as np
import pytest

from tests.helpers.runs import read_manifest, run_on_sim, scenario_file
from tokenswarm.metrics import min_samples_for
from tokenswarm.record import FORMAT_VERSION

pytestmark = pytest.mark.slow

ONE_TASK = {
    "qa": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
           "max_tokens": {"dist": "uniform", "min": 16, "max": 48}},
    "summarization": {"weight": 1, "document_tokens": {"dist": "uniform", "min": 1000, "max": 2000},
                      "max_tokens": {"dist": "fixed", "value": 24}},
    "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 200, "max": 600},
             "max_tokens": {"dist": "uniform", "min": 16, "max": 48}},
    "multi_turn": {"weight": 1, "turns": {"dist": "fixed", "value": 3},
                   "max_tokens": {"dist": "uniform", "min": 8, "max": 24},
                   "think_time_s": {"dist": "fixed", "value": 0.05}},
}


def join(records, truth):
    by_id = {t["id"]: t for t in truth}
    return [(r, by_id[r["response_id"]]) for r in records if r["response_id"] in by_id]


def check_against_truth(records, truth):
    ok = [r for r in records if r["outcome"] == "ok"]
    assert ok, "no successful request"
    pairs = join(ok, truth)
    assert len(pairs) == len(ok), "every successful record joins the server's truth by response id"
    for rec, t in pairs:
        assert rec["output_tokens"] == t["output_tokens"]
        assert rec["prompt_tokens"] == t["prompt_tokens"]
        assert rec["chunk_tokens"] == [n for _, n in t["chunks"]]
        assert len(rec["chunk_offsets_ms"]) == len(t["chunks"])
        assert rec["finish_reason"] == t["finish_reason"]
        assert not rec["tokens_estimated"]
    return pairs


def timing_errors_ms(pairs):
    ttft, gaps = [], []
    for rec, t in pairs:
        server_ttft = (t["chunks"][0][0] - t["received"]) * 1000
        ttft.append(rec["ttft_ms"] - server_ttft)
        s_times = [c[0] * 1000 for c in t["chunks"]]
        c_offs = rec["chunk_offsets_ms"]
        for i in range(1, len(s_times)):
            gaps.append((c_offs[i] - c_offs[i - 1]) - (s_times[i] - s_times[i - 1]))
    return np.array(ttft), np.array(gaps)


@pytest.mark.parametrize("task", ["qa", "summarization", "code", "multi_turn"])
def test_each_user_class_records_match_the_server_exactly(tmp_path, task):
    sc = scenario_file(tmp_path, traffic={"seed": 7, "keep_outputs": True, "classes": {task: ONE_TASK[task]}},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0.5, "step_duration_s": 4,
                             "stop_timeout_s": 10})
    records, truth = run_on_sim(sc, tmp_path / "run", truth=True)
    pairs = check_against_truth(records, truth)
    m = read_manifest(tmp_path / "run")
    assert m["format_version"] == FORMAT_VERSION == 3 and m["complete"] and m["steps"][0]["name"] == "c2"
    assert m["totals"]["records_received"] == len(records) == m["totals"]["requests_started"]
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert {r["task"] for r in records} == {task}
    assert all(r["phase"] in ("warmup", "steady") and r["step"] == 0 for r in records)
    assert all(r["output_text"] is not None for r, _ in pairs)
    if task == "multi_turn":
        sessions = {}
        for r in records:
            sessions.setdefault(r["session_id"], []).append(r["turn"])
        full = [turns for turns in sessions.values() if len(turns) == 3]
        assert full and all(turns == [0, 1, 2] for turns in full)
        # each turn re-sends the history with the real reply: later turns carry more prompt tokens
        by_session = {}
        for r in records:
            by_session.setdefault(r["session_id"], []).append(r["prompt_tokens"])
        assert all(p[0] < p[1] < p[2] for p in by_session.values() if len(p) == 3)


#: The accuracy goals of docs/truth-server.md ("The goals"): at 64 streams the TTFT error p99 and
#: the chunk-gap error p99 are each at most 1 ms.
ACCURACY_GOAL_P99_MS = 1.0


@pytest.mark.timing
def test_ttft_and_chunk_gap_errors_stay_within_the_documented_1ms_p99_at_64_streams(tmp_path):
    # Varied answer lengths keep the 64 streams out of lockstep: 64 requests arriving in one
    # instant would measure the simulator's intake queue, not the client. Short answers (20-60
    # tokens, ~2.4 per 10 ms event) give the TTFT p99 the 1,000 requests the project's sample
    # rule asks of a p99 (tokenswarm.metrics.min_samples_for) and the gap p99 tens of thousands.
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": {"qa": {
        "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 40},
        "max_tokens": {"dist": "uniform", "min": 20, "max": 60}, "sampling": {"ignore_eos": True}}}},
        load={"mode": "closed", "steps": [64], "warmup_s": 1, "step_duration_s": 8, "stop_timeout_s": 10})
    records, truth = run_on_sim(sc, tmp_path / "run", profile="bench-10ms", truth=True)
    records = [r for r in records if r["phase"] == "steady"]
    pairs = check_against_truth(records, truth)
    ttft_err, gap_err = timing_errors_ms(pairs)
    assert ttft_err.size >= min_samples_for(99), f"only {ttft_err.size} requests: too few for a TTFT p99"
    # Client TTFT includes connect + send; chunk gaps are pure arrival differences.
    ttft_p99 = float(np.quantile(np.abs(ttft_err), 0.99))
    gap_p99 = float(np.quantile(np.abs(gap_err), 0.99))
    # On a busy machine the client can be preempted between handing the request to the kernel
    # and reading the clock (``sent``): its TTFT then comes out short, a negative error.
    measured = (f"TTFT error p99 {ttft_p99:.3f} ms over {ttft_err.size} requests (most negative "
                f"{ttft_err.min():.3f} ms), chunk-gap error p99 {gap_p99:.3f} ms over {gap_err.size} gaps; "
                f"documented goal <= {ACCURACY_GOAL_P99_MS} ms each at 64 streams (docs/truth-server.md; met "
                f"on an idle machine in docs/results/accuracy.md, not on 2 cores shared with other work)")
    assert ttft_p99 <= ACCURACY_GOAL_P99_MS, measured
    assert gap_p99 <= ACCURACY_GOAL_P99_MS, measured


def test_open_loop_arrivals_follow_the_configured_rate(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 5, "classes": {"qa": ONE_TASK["qa"]}},
                       load={"mode": "open", "steps": [20, 40], "warmup_s": 1, "step_duration_s": 6,
                             "arrival": "poisson", "max_in_flight": 256, "stop_timeout_s": 10})
    records, truth = run_on_sim(sc, tmp_path / "run", truth=True)
    check_against_truth(records, truth)
    m = read_manifest(tmp_path / "run")
    assert m["load_mode"] == "open" and [s["name"] for s in m["steps"]] == ["r20", "r40"]
    for step, rate in ((0, 20), (1, 40)):
        st = m["steps"][step]
        window = st["ended_at"] - st["steady_at"]
        n = sum(1 for r in records if r["step"] == step and st["steady_at"] <= r["scheduled_at_s"] < st["ended_at"])
        # Poisson count: mean rate*window, sd sqrt(mean); allow 4 sd
        expected = rate * window
        assert abs(n - expected) < 4 * expected ** 0.5, (n, expected)
    lags = [r["schedule_lag_ms"] for r in records]
    assert statistics.median(lags) < 5.0
    assert all(r["user_class"].startswith("OpenLoop:") for r in records)


def test_with_keep_alive_off_every_request_opens_its_own_connection_and_says_so(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": {"qa": ONE_TASK["qa"]}},
                       target={"keep_alive": False},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 2,
                             "stop_timeout_s": 10})
    records, truth = run_on_sim(sc, tmp_path / "run", truth=True)
    check_against_truth(records, truth)
    m = read_manifest(tmp_path / "run")
    assert m["scenario"]["target"]["keep_alive"] is False
    timing = m["workers"][0]["timing"]  # which timing paths this worker ran
    assert {"native_fast_path", "kernel_stamps", "arrival_watcher", "overrides", "counters"} <= set(timing)
    assert all(r["conn_reused"] is False and r["connect_ms"] is not None for r in records)
    for r in records:  # the lag comes from the send's own reading, for every record
        assert abs(r["schedule_lag_ms"] - (r["sent_at_s"] - r["scheduled_at_s"]) * 1000) < 0.0021
        assert r["send_delay_ms"] == pytest.approx(r["schedule_lag_ms"] - r["connect_ms"], abs=0.0021)
