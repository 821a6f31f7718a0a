"""The overload banner is for delays that were in the figures: a generator stall inside a step's
steady window, late dispatches that show in a step's schedule lag; a stall in a warm-up, or the
generator's own send delay (outside TTFT), is a warning, not an overload."""

from tokenswarm.analysis.health import generator_health
from tokenswarm.manifest import LoadStep, RunManifest

T0 = 1_764_480_000.0
STEPS = (LoadStep(0, "c1", "concurrency", 1, T0, T0 + 5, T0 + 65),
         LoadStep(1, "c8", "concurrency", 8, T0 + 65, T0 + 70, T0 + 130))


def manifest(warnings=(), **health):
    return RunManifest(run_id="run", started_at=T0, ended_at=T0 + 130, steps=STEPS, warnings=tuple(warnings),
                       generator_health={"cpu_warning": False, "late_dispatches": 0, **health})


def test_a_stall_inside_a_steady_window_is_an_overload_of_that_step():
    h = generator_health(manifest(max_loop_lag_ms=250.0, untrusted_windows=[[T0 + 90, T0 + 95, "w0: lag"]]))
    assert h["overloaded"] and h["overloaded_steps"] == ["c8"]
    assert any("250 ms" in m and "inside the steady window of step(s) c8" in m for m in h["messages"])


def test_a_stall_outside_every_steady_window_is_a_warning_not_an_overload():
    said = "the load generator was a bottleneck in 2 window(s) (w0: CPU 99%): timings there are inflated"
    h = generator_health(manifest(max_loop_lag_ms=250.0, cpu_warning=True, warnings=[said],
                                  untrusted_windows=[[T0 + 1, T0 + 4, "w0: CPU 99%"], [T0 + 66, T0 + 69, "w0: lag"]]))
    assert not h["overloaded"] and h["overloaded_steps"] is None
    assert any("outside every steady window: not in the figures" in m for m in h["messages"])
    assert f"Run warning: {said} (all outside the steady windows: not in the figures)" in h["messages"]


def test_a_run_that_recorded_no_stall_windows_is_judged_by_its_peaks_over_the_whole_run():
    h = generator_health(manifest(max_loop_lag_ms=250.0))
    assert h["overloaded"] and h["overloaded_steps"] is None  # None: every step of the run


def test_late_dispatches_count_only_where_a_step_shows_them_in_its_schedule_lag():
    rows = [{"task": "all", "step_name": "c1", "schedule_lag_max_ms": 0.4},
            {"task": "all", "step_name": "c8", "schedule_lag_max_ms": 35.0}]
    h = generator_health(manifest(late_dispatches=3, untrusted_windows=[]), rows)
    assert h["overloaded"] and h["overloaded_steps"] == ["c8"]
    calm = [dict(r, schedule_lag_max_ms=0.4) for r in rows]
    h = generator_health(manifest(late_dispatches=3, untrusted_windows=[]), calm)
    assert not h["overloaded"] and any("not in the figures" in m for m in h["messages"])
