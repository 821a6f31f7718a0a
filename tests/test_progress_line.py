"""The progress line says its latency percentiles are live (approximate), and what it counts."""

from __future__ import annotations

from tokenswarm.load.livestats import LiveStats
from tokenswarm.orchestrate.progress import fmt, progress_line, step_label


def test_the_progress_line_names_its_percentiles_live_and_warns_about_late_dispatches():
    line = progress_line(LiveStats(), step="c4 steady", users=4, in_flight=3, late_dispatches=2)
    assert line.startswith("[tokenswarm] step c4 steady | users 4 | in flight 3 |")
    assert "live TTFT p50 - p99 - ms" in line and "live TPOT p50 - ms" in line
    assert line.endswith("WARNING generator behind schedule: 2 late dispatches")
    assert "WARNING" not in progress_line(LiveStats(), step="-", users=0, in_flight=0, late_dispatches=0)


def test_a_step_label_without_a_step_is_a_dash_and_numbers_without_a_value_too():
    assert step_label(None, None, None) == "-" and step_label("u8", "steady", None) == "u8 steady"
    assert fmt(None) == "-" and fmt(12.6) == "13"
