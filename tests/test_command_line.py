"""The command line as a new user meets it: complete help, a quiet terminal, honest exit statuses."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from tests.helpers.runs import ROOT, scenario_file
from tokenswarm.commands import run as run_cmd
from tokenswarm.orchestrate import plugin
from tokenswarm.sim.testing import start_sim

TRAFFIC = {"seed": 3, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30},
                                         "max_tokens": {"dist": "fixed", "value": 16}}}}
LOAD = {"mode": "closed", "steps": [2], "warmup_s": 0.5, "step_duration_s": 5, "stop_timeout_s": 5}


def tokenswarm(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenswarm", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT)


def plugin_flags() -> list[str]:
    recorder = run_cmd._OptionRecorder()
    plugin.add_options(recorder)
    return [flags[0] for flags, kw in recorder.options if kw.get("help") is not argparse.SUPPRESS]


def test_run_help_lists_every_option_of_the_locust_plugin():
    flags = plugin_flags()
    assert {"--records-gzip", "--max-run-time", "--steps", "--records-rotate-mb"} <= set(flags)
    out = tokenswarm("run", "--help", timeout_s=60)
    assert out.returncode == 0, out.stderr[-1000:]
    for flag in flags:
        if flag != "--scenario":  # run takes the scenario as its positional argument
            assert flag in out.stdout, flag
    assert "--print-stats" in out.stdout


def test_plugin_options_given_to_run_are_forwarded_to_locust():
    parser = argparse.ArgumentParser()
    run_cmd.add_arguments(parser)
    args, extra = parser.parse_known_args(
        ["mix", "--records-gzip", "--steps", "1,2", "--max-run-time", "30", "--set", "load.warmup_s=1", "-u", "3"]
    )
    args.passthrough = extra
    argv = run_cmd.build_locust_argv(args, "scenarios/mix.yaml")
    assert "--records-gzip" in argv
    assert argv[argv.index("--steps") + 1] == "1,2"
    assert float(argv[argv.index("--max-run-time") + 1]) == 30
    assert argv[argv.index("--set") + 1] == "load.warmup_s=1"
    assert argv[-2:] == ["-u", "3"]
    assert "--records-rotate-mb" not in argv  # left at its default: not passed


@pytest.fixture(scope="module")
def sim():
    with start_sim("--profile", "tiny-fast") as s:
        yield s


def _stats_tables(output: str) -> int:
    """Locust request-statistics tables printed (the final summary is one; the rest are periodic)."""
    return len(re.findall(r"^Type\s+Name\s+# reqs", output, flags=re.M))


@pytest.mark.slow
def test_a_headless_run_is_quiet_by_default_and_says_where_the_report_goes(tmp_path, sim):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load=LOAD)
    out = tmp_path / "run"
    res = tokenswarm("run", str(sc), "--headless", "--host", sim.base_url, "--out", str(out))
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-3000:]
    assert _stats_tables(res.stderr) == 1, res.stderr[-3000:]  # Locust's final summary only
    assert f"tokenswarm report {out}" in res.stdout and str(out / "report" / "report.html") in res.stdout
    printed = re.search(r"verdict: .*\(exit status (\d)\)", res.stdout)
    assert printed and int(printed.group(1)) == res.returncode


@pytest.mark.slow
def test_print_stats_brings_back_locusts_periodic_tables(tmp_path, sim):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load=LOAD)
    res = tokenswarm("run", str(sc), "--headless", "--host", sim.base_url, "--out", str(tmp_path / "run"),
                     "--print-stats")
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-3000:]
    assert _stats_tables(res.stderr) >= 3, res.stderr[-3000:]  # every 2 s over a ~6 s run, and the summary


@pytest.mark.slow
def test_the_demo_exits_with_the_status_its_verdict_printed(tmp_path):
    out = tmp_path / "demo"
    # one round: the exit status is what is checked here (the documented two-round demo is a recipe)
    res = tokenswarm("demo", "--profile", "tiny-fast", "--steps", "[1]", "--step-duration", "2", "--rounds", "1",
                     "--out", str(out), timeout_s=300)
    printed = re.findall(r"\(exit status (\d+)\)", res.stdout)
    assert printed, res.stdout[-3000:] + res.stderr[-3000:]
    assert {int(p) for p in printed} == {res.returncode}, res.stdout[-3000:]
    assert res.returncode == 0 and "verdict" in res.stdout and (out / "report" / "summary.json").exists()


def test_an_unknown_slo_on_the_command_line_gets_the_closest_name():
    from tokenswarm.orchestrate.verdict import parse_slo_args

    with pytest.raises(ValueError, match=r"unknown SLO 'ttft_p95'.*\(did you mean 'ttft_p95_ms'\?\)"):
        parse_slo_args(["ttft_p95=800"])
    with pytest.raises(ValueError) as info:
        parse_slo_args(["colour=1"])
    assert "did you mean" not in str(info.value)
