"""benchmarks/accuracy.py names the first load whose errors exceed the goal, and who was late."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benchmarks" / "accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


def row(streams, ttft, gap, cpu=30.0, loop=2.0, srv=1.5, spec="none"):
    return dict(spec=spec, streams=streams, ttft_err_p99_ms=ttft, gap_err_p99_ms=gap, client_cpu_max_pct=cpu,
                client_loop_lag_max_ms=loop, server_lag_p99_ms=srv)


def test_goals_are_one_ms_up_to_64_streams_and_two_above():
    assert [accuracy.goal_ms(n) for n in (1, 64, 65, 256, 512)] == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert "within the goals" in accuracy.diagnose([row(64, 0.9, 0.5), row(256, 1.9, 0.2)])[0]


def test_a_run_within_the_goals_still_says_when_the_simulator_could_not_offer_the_load():
    line = accuracy.diagnose([row(256, 0.3, 0.02), row(512, 0.6, 0.02, cpu=76.0, loop=45.0, srv=90.0)])[0]
    assert line.startswith("spec=none: every load within the goals")
    assert "at 512 streams the simulator was late (emission lag p99 90 ms)" in line and "51,200 events/s" in line
    assert "256 streams" not in line


def test_the_first_load_over_its_goal_is_named_with_the_late_side():
    lines = accuracy.diagnose([row(64, 0.5, 0.1), row(256, 1.5, 3.8, srv=240.0), row(512, 9.0, 9.0, cpu=95.0)])
    assert len(lines) == 1 and "from 256 streams" in lines[0]
    assert "simulator is late" in lines[0] and "client is saturated" not in lines[0]
    client = accuracy.diagnose([row(256, 5.0, 1.0, cpu=97.0, loop=35.0)])[0]
    assert "client is saturated" in client and "simulator" not in client
    unexplained = accuracy.diagnose([row(64, 1.2, 0.1)])[0]
    assert "from 64 streams" in unexplained and "neither side" in unexplained


def test_each_speculation_mode_is_judged_on_its_own():
    lines = accuracy.diagnose([row(256, 1.0, 0.1), row(256, 2.5, 4.0, srv=300.0, spec="draft")])
    assert lines[0].startswith("spec=none: every load within")
    assert lines[1].startswith("spec=draft: errors exceed the goal from 256 streams")


def test_draft_answers_are_longer_so_both_modes_stream_about_as_many_events_per_request():
    assert accuracy.output_tokens("none", None) == (150, 250)
    lo, hi = accuracy.output_tokens("draft", None)
    assert (lo, hi) == (360, 600)  # ~2.4 tokens per draft event: ~200 events per request either way
    assert accuracy.output_tokens("draft", 1.0) == (150, 250)  # the high-churn case on request
    assert accuracy.output_tokens("none", 3.0) == (150, 250)  # the scale only applies to draft
