"""The run flags read before Locust is imported: ``-t`` as Locust reads it, and a ``tokenswarm run``
that does not pay for Locust's import before it hands the process over."""

import pytest
from locust.util.timespan import parse_timespan

from tests.helpers.fresh import fresh_python
from tokenswarm.orchestrate.runflags import RunFlagError, RunFlags, timespan_s

SPANS = ["0", "20", "007", "20s", "3m", "2h", "1h20m", "3h30m10s", "90m", "1h1s", "100000s",
         "", "s", "h", "1x", "1.5", "1m2h", "20 s", "-5", "1h20", "m5", "20ss", "٣"]


@pytest.mark.parametrize("text", SPANS)
def test_a_run_time_reads_as_locust_reads_it(text):
    try:
        expected: object = parse_timespan(text)
    except ValueError:
        expected = ValueError
    try:
        got: object = timespan_s(text)
    except ValueError:
        got = ValueError
    assert got == expected, text


def test_a_bad_run_time_is_an_error_naming_the_flag():
    with pytest.raises(RunFlagError, match=r"-t/--run-time '5 minutes': expected a duration such as 90"):
        RunFlags(run_time="5 minutes").run_time_s()
    assert RunFlags(run_time="1h30m").run_time_s() == 5400.0


def test_tokenswarm_run_checks_its_flags_without_importing_locust():
    # `tokenswarm run` execs Locust once the scenario and flags are checked: importing Locust
    # before that (its gevent patching, ~0.6 s of CPU) would be paid twice per run
    res = fresh_python("\n".join([
        "import argparse, sys",
        "import tokenswarm.commands.run as run",
        "parser = argparse.ArgumentParser()",
        "run.add_arguments(parser)",
        "args, rest = parser.parse_known_args(['scenarios/qa.yaml', '--headless', '-t', '1m', '--steps', '1,2'])",
        "args.passthrough = rest",
        "run.run_flags(args).check(run.resolve_scenario_path(args.scenario), None)",
        "print(sorted(m for m in sys.modules if m == 'locust' or m.startswith('locust.')))",
    ]))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]", res.stdout


def test_a_scenario_already_parsed_is_not_parsed_again_unless_a_flag_changes_its_plan(monkeypatch):
    from tokenswarm.orchestrate import runflags
    from tokenswarm.workload.scenario import load_scenario

    parsed = load_scenario("scenarios/qa.yaml")
    loads = []
    monkeypatch.setattr(runflags, "load_scenario", lambda *a: loads.append(a) or load_scenario(*a))
    assert RunFlags(run_time="1m", users="4").check(parsed.path, None, parsed) is parsed and loads == []
    planned = RunFlags(steps="1,2").check(parsed.path, None, parsed)  # --steps: parsed again, with the plan
    assert len(loads) == 1 and planned is not parsed and list(planned.load.steps) == [1, 2]
    with pytest.raises(RunFlagError, match="-u/--users"):  # the flags are still checked
        RunFlags(users="many").check(parsed.path, None, parsed)
