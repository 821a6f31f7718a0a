"""benchmarks/hostidle.py: the host's wake-up charge, summarised, and the switch that keeps cores awake."""

from __future__ import annotations

import importlib
import struct
import subprocess
import sys
from types import ModuleType

import pytest

from tests.helpers.runs import ROOT


def _hostidle() -> ModuleType:
    saved = list(sys.path)
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        return importlib.import_module("hostidle")
    finally:
        sys.path[:] = saved


def test_the_summary_is_each_idles_mean_against_the_back_to_back_mean_slow_wake_ups_included():
    h = _hostidle()
    s = h.summarize({"hot_us": [40.0, 50.0, 60.0], "after_idle_us": {"0.5": [50.0, 50.0, 50.0],
                                                                     "2.5": [50.0, 50.0, 500.0]}})
    assert s["hot_us"] == pytest.approx(50.0)
    assert s["after_idle_us"] == {"0.5": pytest.approx(50.0), "2.5": pytest.approx(200.0)}
    assert s["ratio"] == {"0.5": pytest.approx(1.0), "2.5": pytest.approx(4.0)}, "one slow wake in three is charged"
    text = h.line(s)
    assert "back to back 50 µs" in text and "after 2.5 ms idle 200 µs (4.0x)" in text and "idle as the machine sets" in text
    assert "cpu_dma_latency 0" in h.line(s, warm_core=True)


def test_a_probe_whose_clock_saw_no_work_is_refused():
    with pytest.raises(ValueError, match="no CPU time"):
        _hostidle().summarize({"hot_us": [0.0, 0.0], "after_idle_us": {"1": [3.0]}})


def test_the_probe_times_the_work_back_to_back_and_after_each_idle_asked_for():
    raw = _hostidle().measure(idle_ms=(0.0, 0.2), samples=12)
    assert set(raw["after_idle_us"]) == {"0", "0.2"}
    assert all(len(v) == 12 for v in raw["after_idle_us"].values()) and len(raw["hot_us"]) >= 10
    assert all(x > 0 for x in raw["hot_us"])


def test_the_probe_runs_its_child_where_the_cost_benchmarks_run_their_clients(monkeypatch):
    h = _hostidle()
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # as when a benchmark script runs
    costrun = importlib.import_module("costrun")
    started = []

    class Child:
        returncode = 0

        def communicate(self, timeout):
            return '{"hot_us": [10.0], "after_idle_us": {"2.5": [30.0]}}', ""

    def start_client(cmd, env, src, **popen):
        started.append((cmd, src, popen))
        return Child()

    monkeypatch.setattr(costrun, "start_client", start_client)
    assert h.probe(idle_ms=(2.5,), samples=7)["ratio"] == {"2.5": pytest.approx(3.0)}
    (cmd, src, popen), = started
    assert cmd[1].endswith("hostidle.py") and cmd[2:] == ["--raw", "--samples", "7", "--idle-ms", "2.5"]
    assert src == costrun.ROOT and popen["stdout"] is subprocess.PIPE


def test_a_probe_child_that_fails_is_reported_with_its_error_output(monkeypatch):
    h = _hostidle()
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    costrun = importlib.import_module("costrun")

    class Child:
        returncode = 1

        def communicate(self, timeout):
            return "", "Traceback: boom"

    monkeypatch.setattr(costrun, "start_client", lambda *a, **k: Child())
    with pytest.raises(RuntimeError, match="exited with 1: Traceback: boom"):
        h.probe()


def test_warm_core_holds_the_latency_request_at_zero_for_the_block_only(tmp_path):
    h = _hostidle()
    qos = tmp_path / "cpu_dma_latency"
    qos.write_bytes(b"")
    with h.warm_core(True, qos):
        assert qos.read_bytes() == struct.pack("i", 0)
    with h.warm_core(False, tmp_path / "never-opened"):
        pass
    assert not (tmp_path / "never-opened").exists()


def test_warm_core_names_the_file_it_could_not_hold():
    missing = ROOT / "no-such-dir" / "cpu_dma_latency"
    hostidle = _hostidle()
    with pytest.raises(SystemExit, match=r"--warm-core: cannot open .*no-such-dir/cpu_dma_latency .*needs root"), \
            hostidle.warm_core(True, missing):
        pass
