"""The early start of the long recipes (tests/study/early.py): a few at a time, the rest as
places free up, each test getting its recipe's output whether it started early or not."""

import sys

import pytest

from tests.study.early import MAX_RUNNING, EarlyRecipes, Recipe

PY = sys.executable


def command(code: str):
    return lambda workdir, port: [PY, "-c", code, str(port)]


LONG = command("import time; time.sleep(120)")
QUICK = command("import sys; print('done on', sys.argv[1])")


def test_no_more_than_max_running_start_and_the_next_starts_when_one_ends(tmp_path):
    table = {f"long{i}": Recipe(f"long{i}", LONG) for i in range(MAX_RUNNING)} | {"quick": Recipe("quick", QUICK)}
    early = EarlyRecipes(tmp_path, table, list(table))
    try:
        early.tick()
        assert sorted(early.runs) == sorted(f"long{i}" for i in range(MAX_RUNNING)) and early.pending == ["quick"]
        early.runs["long0"].kill()
        early.tick()
        assert "quick" in early.runs and not early.pending
        res, workdir = early.outcome("quick")
        assert res.returncode == 0 and res.stdout == "done on None\n" and workdir == tmp_path / "quick"
    finally:
        early.close()
    assert all(not run.running for run in early.runs.values()), "close() ends every recipe"


def test_the_next_recipe_starts_as_soon_as_a_test_has_waited_for_one_to_end(tmp_path):
    names = [f"long{i}" for i in range(MAX_RUNNING)] + ["next"]
    early = EarlyRecipes(tmp_path, {n: Recipe(n, QUICK if n == "next" else LONG) for n in names}, names)
    try:
        early.tick()
        assert early.pending == ["next"]
        early.runs["long0"].kill()  # it ends while its test waits for it
        res, _ = early.outcome("long0")
        assert res.returncode != 0  # killed
        assert "next" in early.runs and not early.pending
    finally:
        early.close()


def test_a_recipe_not_started_early_runs_when_its_test_asks(tmp_path):
    early = EarlyRecipes(tmp_path, {"quick": Recipe("quick", QUICK)}, [])
    early.tick()
    assert not early.runs
    res, _ = early.outcome("quick")
    assert res.returncode == 0 and res.stdout.startswith("done on")


def test_a_pending_recipe_asked_for_before_its_turn_runs_then_and_is_not_started_again(tmp_path):
    table = {f"long{i}": Recipe(f"long{i}", LONG) for i in range(MAX_RUNNING)} | {"quick": Recipe("quick", QUICK)}
    early = EarlyRecipes(tmp_path, table, list(table))
    try:
        early.tick()
        res, _ = early.outcome("quick")
        assert res.returncode == 0 and "quick" not in early.pending
    finally:
        early.close()


ASKS_THE_SIM = command("import sys, urllib.request; port = sys.argv[1]; "
                       "urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models', timeout=5).read(); "
                       "print('the simulator answered on', port)")


@pytest.mark.slow
def test_a_recipe_with_a_simulator_starts_its_command_once_the_simulator_answers(tmp_path):
    sim = Recipe("with-sim", ASKS_THE_SIM, sim_argv=lambda port: [PY, "-m", "tokenswarm", "sim", "--port", str(port)])
    early = EarlyRecipes(tmp_path, {"with-sim": sim}, ["with-sim"])
    try:
        early.tick()
        run = early.runs["with-sim"]
        assert run.sim.poll() is None
        run.proc.wait(30)
        early.tick()  # a later test's set-up: the command has ended, its simulator goes
        assert run.sim.poll() is not None, "the simulator is stopped once its command has ended"
        res, _ = early.outcome("with-sim")
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"the simulator answered on {run.port}\n"
    finally:
        early.close()


def test_a_recipe_that_ended_long_before_its_test_asks_is_not_past_its_timeout(tmp_path):
    # started with the suite, asked for twenty minutes later: its timeout counts its own run
    early = EarlyRecipes(tmp_path, {"quick": Recipe("quick", QUICK, timeout_s=5)}, ["quick"])
    early.tick()
    run = early.runs["quick"]
    run.proc.wait(30)
    run.started_at -= 1200
    res, _ = early.outcome("quick")
    assert res.returncode == 0 and res.stdout.startswith("done on")


def test_a_recipe_past_its_timeout_is_killed_and_named(tmp_path):
    early = EarlyRecipes(tmp_path, {"stuck": Recipe("stuck", LONG, timeout_s=0.5)}, [])
    with pytest.raises(AssertionError, match=r"stuck: still running after 0.5 s"):
        early.outcome("stuck")
    assert not early.runs["stuck"].running


def test_the_recipes_a_worker_reaches_start_together_and_a_running_one_is_not_started_again(tmp_path):
    names = [f"long{i}" for i in range(MAX_RUNNING)]
    early = EarlyRecipes(tmp_path, {n: Recipe(n, LONG) for n in names}, [])  # an xdist worker: nothing early
    try:
        early.start(names[:1])
        first = early.runs["long0"].proc
        early.start(names)
        assert sorted(early.runs) == sorted(names) and not early.pending
        assert all(run.running for run in early.runs.values())
        assert early.runs["long0"].proc is first, "a recipe already running keeps its process"
    finally:
        early.close()
