"""Why a run stopped decides how it stops: hard stops do not wait for streams in flight."""

from types import SimpleNamespace

import pytest
from locust.env import Environment

from tests.helpers.runs import ROOT
from tokenswarm.collect.manifest import ManifestFile
from tokenswarm.load.users import QAUser
from tokenswarm.manifest import RunManifest
from tokenswarm.orchestrate.controller import RunController
from tokenswarm.orchestrate.ending import EXIT_INTERRUPTED, StopReason
from tokenswarm.workload.scenario import load_scenario


@pytest.fixture(autouse=True)
def locust_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["locust"])  # Locust's web UI reads its form options from argv


def running_controller(tmp_path, web_ui: bool) -> RunController:
    """A controller whose run has started (a manifest file, no users), stop_timeout 300 s."""
    env = Environment(user_classes=[QAUser])
    env.create_local_runner()
    if web_ui:
        env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    env.stop_timeout = 300
    ctl = RunController(env, load_scenario(str(ROOT / "scenarios" / "qa.yaml")), fixed_users=False)
    ctl.recording = SimpleNamespace(manifest=ManifestFile(tmp_path, RunManifest(run_id="r")))  # type: ignore[assignment]
    return ctl


def test_a_stop_the_run_did_not_ask_for_in_the_web_ui_is_the_stop_button_and_cancels_at_once(tmp_path):
    ctl = running_controller(tmp_path, web_ui=True)
    try:
        ctl.on_stopping()  # what Locust's /stop route fires before it stops the users
        assert ctl.ending.reason is StopReason.WEB_UI_STOP
        assert ctl.env.stop_timeout == 0, "users are killed (streams -> cancelled records), not waited for"
        assert any("web UI" in w for w in ctl.recording.manifest.current.warnings)
    finally:
        ctl.env.runner.quit()


def test_the_plans_own_end_keeps_the_graceful_stop(tmp_path):
    ctl = running_controller(tmp_path, web_ui=False)
    ctl.steps.plan = SimpleNamespace(machine=SimpleNamespace(done=True))  # type: ignore[assignment]
    ctl.on_stopping()
    assert ctl.ending.reason is StopReason.PLAN_DONE and ctl.env.stop_timeout == 300
    assert ctl.recording.manifest.current.warnings == ()


@pytest.mark.parametrize("reason", list(StopReason))
def test_only_outside_stops_are_interruptions_and_every_stop_but_the_plans_cuts_a_step(reason):
    outside = reason in (StopReason.SIGINT, StopReason.SIGTERM, StopReason.WEB_UI_STOP, StopReason.LOCUST_QUIT)
    assert reason.interrupted is outside
    assert reason.hard is (outside or reason is StopReason.MAX_RUN_TIME)
    assert reason.cuts_plan is (reason not in (StopReason.PLAN_DONE, StopReason.RUN_TIME))
    assert EXIT_INTERRUPTED == 130


# Locust fires test_stop in whichever greenlet stops the runner, and a second stopper's quit kills
# the runner's greenlets -- the first stopper among them (seen: a master exited 0 with its
# manifest unfinalised when its heartbeat found the workers missing as the plan ended).

def test_a_stop_whose_caller_is_killed_goes_on_and_quitting_waits_for_it(tmp_path):
    import gevent

    ctl = running_controller(tmp_path, web_ui=False)
    done = []

    def slow_stop() -> None:  # waits like the workers' last batches, then sets the exit status
        gevent.sleep(0.3)
        done.append(True)
        ctl.env.process_exit_code = 3

    ctl._stop = slow_stop  # type: ignore[method-assign]
    try:
        caller = gevent.spawn(ctl.stop)
        gevent.sleep(0.05)
        caller.kill(block=True)  # what runner.greenlet.kill does to the first stopper
        assert caller.dead and not done, "the stop goes on without its caller"
        ctl.on_quitting()  # Locust's quitting event, fired before it reads the exit status
        assert done and ctl.env.process_exit_code == 3
        ctl.stop()  # a later stopper finds it done
        assert done == [True]
    finally:
        ctl.env.runner.quit()


def test_a_stop_that_never_ends_is_abandoned_at_quitting_and_the_run_finalised_as_broken(tmp_path, monkeypatch):
    import gevent

    from tokenswarm.orchestrate import controller as controller_module
    from tokenswarm.orchestrate.verdict import EXIT_RUN_BROKE

    monkeypatch.setattr(controller_module, "FINALISE_GRACE_S", 0.2)
    ctl = running_controller(tmp_path, web_ui=False)
    ctl.env.stop_timeout = 0
    finalised = []
    ctl._stop = lambda: gevent.sleep(3600)  # type: ignore[method-assign]  # e.g. a scrape that never answers
    ctl.finalize_manifest = lambda: finalised.append(ctl.ending.broken)  # type: ignore[method-assign]
    ctl.recording.close_records = ctl.recording.close = lambda: None  # type: ignore[union-attr]
    try:
        caller = gevent.spawn(ctl.stop)
        gevent.sleep(0.05)
        caller.kill(block=True)
        ctl.on_quitting()
        assert ctl.env.process_exit_code == EXIT_RUN_BROKE and ctl.finalised
        assert finalised and "did not end within 0.2 s" in finalised[0]
        assert any("did not end within" in w for w in ctl.recording.manifest.current.warnings)
    finally:
        ctl.env.runner.quit()
