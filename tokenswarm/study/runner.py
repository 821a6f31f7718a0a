"""Run a study: every arm-round in interleaved order, each an ordinary ``tokenswarm run``.

For each arm-round not yet done: start the arm's server (or probe the user's), wait until it
is ready, send the warm-up requests (answers discarded), run the scenario headless into
``runs/<arm>-r<round>`` while watching that the server stays up, stop the server. A server
that never becomes ready or dies mid-round stops the study (exit status 3) with the reason
in the manifest; what was recorded so far stays, and a resumed study re-runs that
arm-round after moving its partial run directory aside (never deleting it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from tokenswarm.load.setup import scenario_slos
from tokenswarm.orchestrate.adaptive import stopping_rule
from tokenswarm.orchestrate.sizing import plan_lines
from tokenswarm.redact import redact
from tokenswarm.study.manifest import StudyManifest, run_complete
from tokenswarm.study.order import interleaved_order
from tokenswarm.study.server import ArmServer, ServerNotReady
from tokenswarm.study.spec import Study, checkable
from tokenswarm.workload.scenario import load_scenario, parse_override

EXIT_OK, EXIT_BAD_INPUT, EXIT_SERVER = 0, 2, 3
#: the run itself failing: same status as a server failing (the study could not finish)
EXIT_RUN_FAILED = 3


class ArmFailed(RuntimeError):
    """An arm-round could not be completed; ``exit_status`` is the study's exit status."""

    def __init__(self, message: str, exit_status: int = EXIT_SERVER) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def _headers(scenario_path: str) -> dict[str, str]:
    sc = load_scenario(scenario_path)
    key = sc.target.api_key()
    return {**dict(sc.target.headers), **({"Authorization": f"Bearer {key}"} if key else {})}


def _set_aside(out: Path, run_dir: Path) -> str | None:
    """Move a partial run directory out of the way (kept, never deleted); its new name."""
    if not run_dir.exists():
        return None
    i = 1
    while (target := run_dir.with_name(f"{run_dir.name}.failed-{i}")).exists():
        i += 1
    run_dir.rename(target)
    return str(target.relative_to(out))


def _terminate(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop a run with SIGINT, SIGKILL if it does not end.

    SIGINT, not SIGTERM: on SIGINT the run writes its records and manifest before it exits;
    on SIGTERM Locust exits at once and what was recorded in memory would be lost.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def run_arm_round(study: Study, out: Path, manifest: StudyManifest, round_no: int, arm_name: str,
                  say: Callable[[str], None]) -> None:
    """One arm-round; raises :class:`ArmFailed` with the reason when it cannot complete."""
    arm = study.arm(arm_name)
    entry = manifest.entry(round_no, arm_name)
    run_dir = out / entry["run_dir"]
    aside = _set_aside(out, run_dir)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    manifest.update(round_no, arm_name, status="starting", started_at=time.time(), error=None,
                    attempts_count=entry["attempts_count"] + 1,
                    set_aside_dirs=entry["set_aside_dirs"] + ([aside] if aside else []))
    scenario = load_scenario(study.scenario)
    server = ArmServer.start(arm, logs / f"{arm_name}-r{round_no}-server.log", _headers(study.scenario))
    run_proc: subprocess.Popen[bytes] | None = None
    try:
        say(f"round {round_no}, arm {arm_name}: waiting for {server.base_url}/v1/models")
        try:
            server.wait_ready(study.ready_timeout_s)
        except ServerNotReady as e:
            raise ArmFailed(str(e), EXIT_SERVER) from None
        problems = server.warm_up(scenario.target.api, scenario.target.model, study.warmup_requests)
        manifest.update(round_no, arm_name, status="running", base_url=server.base_url, models=server.models,
                        warmup_problems=problems)
        cmd = [sys.executable, "-m", "tokenswarm", "run", study.scenario, "--headless", "--host", server.base_url,
               "--out", str(run_dir), "--only-summary"]
        for o in (*study.overrides, *arm.overrides):  # {host}: this arm's server, e.g. its exporter's URL
            cmd += ["--set", o.replace("{host}", server.base_url)]
        say(f"round {round_no}, arm {arm_name}: running -> {run_dir}")
        with open(logs / f"{arm_name}-r{round_no}-run.log", "ab") as log:
            run_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        while run_proc.poll() is None:
            status = server.exit_status()
            if status is not None:
                _terminate(run_proc, 30)
                raise ArmFailed(
                    f"round {round_no}, arm {arm_name}: the server exited with status {status} during the run; "
                    f"the records so far are kept in {run_dir} (server log {server.log_path}):\n{server.log_tail()}")
            time.sleep(0.2)
        code = run_proc.returncode
        manifest.update(round_no, arm_name, run_exit_status=code)
        if code not in (0, 1):  # 1 = an SLO failed: the run itself is fine
            raise ArmFailed(f"round {round_no}, arm {arm_name}: tokenswarm run exited with status {code} "
                            f"(log {logs / f'{arm_name}-r{round_no}-run.log'})", EXIT_RUN_FAILED)
        if not run_complete(run_dir):
            raise ArmFailed(f"round {round_no}, arm {arm_name}: {run_dir / 'manifest.json'} does not say the run "
                            "completed", EXIT_RUN_FAILED)
    finally:
        if run_proc is not None:
            _terminate(run_proc, 30)
        manifest.update(round_no, arm_name, server_exit_status=server.stop(study.stop_timeout_s))
    manifest.update(round_no, arm_name, status="done", ended_at=time.time())


def study_plan(study: Study) -> tuple[list[str], list[str]]:
    """What every run of the study can judge, before any server starts (the dry estimate).

    Each run measures its server with a pilot request and prints its own plan; this one assumes
    the stream speed (and says so), and multiplies a run's length by the arm-rounds.
    """
    sc = load_scenario(study.scenario, dict(parse_override(checkable(o)) for o in study.overrides) or None)
    lines, warnings = plan_lines(sc, scenario_slos(sc))
    runs = len(study.arms) * study.rounds
    lines.append(f"sizing: the study runs this plan {runs} times ({len(study.arms)} arms x {study.rounds} rounds), "
                 "each after a server start and warm-up requests")
    return lines, warnings


def study_stopping(study: Study) -> dict[str, object]:
    """How long each step of each arm-round runs: the same rule per cell (step x task) in every round.

    With ``load.until`` each run's steps are adaptive (:mod:`tokenswarm.orchestrate.adaptive`),
    every arm and round under the one rule; without it, every step runs its fixed window.
    """
    sc = load_scenario(study.scenario, dict(parse_override(checkable(o)) for o in study.overrides) or None)
    until = sc.load.until
    if until is None:
        return {"until": None, "rule": f"fixed: every step's steady window is {sc.load.step_duration_s:g} s"}
    return {"until": until.to_dict(), "rule": stopping_rule(until) + "; the same rule for every cell in every "
            "arm-round"}


def run_study(study: Study, out: Path, say: Callable[[str], None] = print) -> int:
    """Run (or resume) ``study`` into ``out``; the exit status of the contract (0, 2 or 3)."""
    order = interleaved_order([a.name for a in study.arms], study.rounds)
    try:
        manifest = StudyManifest.open(out, study, order)
    except ValueError as e:
        print(redact(f"tokenswarm study: {e}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    manifest.data["stopping"] = study_stopping(study)
    manifest.save()
    lines, warnings = study_plan(study)
    for line in lines:
        say(f"tokenswarm study: {line}")
    for text in warnings:
        print(f"tokenswarm study: WARNING: {text}", file=sys.stderr, flush=True)
    say(f"tokenswarm study: {len(study.arms)} arms x {study.rounds} rounds, order "
        + " ".join(a for _, a in order) + f" -> {out}")
    for round_no, arm_name in order:
        state = manifest.entry(round_no, arm_name)
        if state["status"] == "done" and run_complete(out / state["run_dir"]):
            say(f"round {round_no}, arm {arm_name}: done earlier, skipped")
            continue
        try:
            run_arm_round(study, out, manifest, round_no, arm_name, say)
        except ArmFailed as exc:
            manifest.fail(round_no, arm_name, str(exc))
            manifest.finish()
            print(redact(f"tokenswarm study: error: {exc}"), file=sys.stderr)
            print(f"tokenswarm study: finished arm-rounds are kept in {out}; run the same command again to resume",
                  file=sys.stderr)
            return exc.exit_status
        except KeyboardInterrupt:
            manifest.update(round_no, arm_name, status="interrupted", ended_at=time.time())
            manifest.finish()
            print(f"tokenswarm study: interrupted; run the same command again to resume ({out})", file=sys.stderr)
            return 130
    manifest.finish()
    return EXIT_OK
