"""How a run ends: why it stopped, whether that was an interruption, and the hard stop.

A run ends for one of the :class:`StopReason` s. Two kinds of end differ in what happens to
the requests still in flight:

* **graceful** (the plan ran out, ``-t``, the circuit breaker): Locust lets every user finish
  its current request for up to ``stop_timeout`` (``load.stop_timeout_s``) and no user starts
  another (:func:`tokenswarm.load.users.may_send`);
* **hard** (the ``--max-run-time`` guard, Ctrl-C, SIGTERM, the web UI's stop): in-flight
  streams are cancelled at once -- each still becomes a record, with outcome ``cancelled``
  (see :func:`tokenswarm.wire.client.stream_call`) -- so the process ends within a few
  seconds whatever ``stop_timeout`` says.

An *interruption* (Ctrl-C, SIGTERM, the web UI's stop, or Locust quitting on its own) marks the
manifest ``complete: false`` and makes the process exit with :data:`EXIT_INTERRUPTED`, as a
study does. Any stop before the plan's own end (``-t`` included, unless it is the whole plan
of a fixed ``-u`` run) leaves the step that was running marked ``partial`` in the manifest.

:class:`RunEnding` is the run's side of this: it holds the stop reason, arms the guards that
end a run (``--max-run-time``, ``-t`` over a shaped plan, the circuit breaker, the signals),
reads Locust's own stops, and ends the run the way its kind of end asks.
"""

from __future__ import annotations

import enum
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import gevent

from tokenswarm.load.breaker import CircuitBreaker
from tokenswarm.orchestrate.verdict import EXIT_INTERRUPTED, EXIT_OK, EXIT_SLO_MISSED, conclude
from tokenswarm.redact import redact

if TYPE_CHECKING:  # the probing hook reads records with the analysis (numpy): imported only by a search or sweep
    from tokenswarm.orchestrate.probing import ProbingPlan

log = logging.getLogger("tokenswarm")

#: Worker message (master -> workers): stop without waiting for in-flight streams.
MSG_HARD_STOP = "tokenswarm_hard_stop"


class StopReason(str, enum.Enum):
    """Why a run stopped: the manifest's ``stop_reason``."""

    PLAN_DONE = "plan_done"  #: every step of the load plan ran
    RUN_TIME = "run_time"  #: Locust's -t/--run-time
    MAX_RUN_TIME = "max_run_time"  #: the --max-run-time guard (default: 1.5 x the plan + 2 min)
    CIRCUIT_BREAKER = "circuit_breaker"  #: every request failed the same way
    SIGINT = "sigint"  #: Ctrl-C
    SIGTERM = "sigterm"  #: killed from outside (kill, docker stop, a CI timeout)
    WEB_UI_STOP = "web_ui_stop"  #: the web UI's stop button
    LOCUST_QUIT = "locust_quit"  #: Locust stopped or quit the run on its own (not tokenswarm's plan)

    @property
    def interrupted(self) -> bool:
        """Stopped from outside the run: manifest ``complete: false``, exit status 130."""
        return self in INTERRUPTIONS

    @property
    def hard(self) -> bool:
        """In-flight streams are cancelled at once instead of waited for."""
        return self in HARD_STOPS

    @property
    def cuts_plan(self) -> bool:
        """The step running at the stop did not run its planned length (it is ``partial``).

        ``-t`` is not counted here: it is the whole plan of a fixed ``-u`` run, and cuts only a
        scenario's steps (the controller knows which).
        """
        return self not in (StopReason.PLAN_DONE, StopReason.RUN_TIME)


INTERRUPTIONS = frozenset({StopReason.SIGINT, StopReason.SIGTERM, StopReason.WEB_UI_STOP, StopReason.LOCUST_QUIT})
HARD_STOPS = INTERRUPTIONS | {StopReason.MAX_RUN_TIME}

#: The signals a run finalises on, and the reason each stands for.
SIGNAL_REASONS = {signal.SIGINT: StopReason.SIGINT, signal.SIGTERM: StopReason.SIGTERM}


def install_signal_handlers(on_signal: Callable[[StopReason], None]) -> None:
    """Route SIGINT and SIGTERM to ``on_signal(reason)`` (called in a new greenlet).

    Why Python-level handlers and not gevent's: Locust installs its SIGTERM watcher only after
    a headless shape run has ended (so SIGTERM killed the process with nothing finalised), and
    Ctrl-C reaches the run as a ``KeyboardInterrupt`` in whichever greenlet was running, which
    may be a stream's (its record is then lost). These handlers only schedule the stop.
    """

    def handler(signum: int, _frame: Any) -> None:
        gevent.spawn(on_signal, SIGNAL_REASONS[signal.Signals(signum)])

    for signum in SIGNAL_REASONS:
        signal.signal(signum, handler)


def cut_stop_timeout(environment: Any, *, is_master: bool) -> None:
    """Make Locust stop users at once: with ``stop_timeout`` 0 it kills each user's greenlet,
    whose stream then ends as a ``cancelled`` record. A master tells its workers too (before
    its stop message, which they read after it)."""
    environment.stop_timeout = 0
    runner = environment.runner
    if is_master:
        runner.send_message(MSG_HARD_STOP, None)
    elif runner is not None and runner.state in ("stopping", "cleanup"):
        # a graceful stop already waits for the users' current requests: end them now
        runner.user_greenlets.kill(block=False)


def final_exit_status(verdict_code: int, *, probing: bool, reason: StopReason | None,
                      partial_steps: list[str]) -> int:
    """The process's exit status from the verdict's and why the run ended: a search's (or
    sweep's) failing probes are what it measures, not a missed gate; an interrupted run exits
    with :data:`EXIT_INTERRUPTED` whatever its verdict."""
    code = verdict_code
    if probing and code == EXIT_SLO_MISSED:
        code = EXIT_OK
        print("tokenswarm: the failing probes are the search's findings (capacity.json); exit status 0", flush=True)
    if reason is not None and reason.interrupted:
        print(f"tokenswarm: the run was interrupted ({reason.value}); the manifest says complete: false"
              + (f", partial step(s): {', '.join(partial_steps)}" if partial_steps else "")
              + f"; exit status {EXIT_INTERRUPTED}", file=sys.stderr, flush=True)
        code = EXIT_INTERRUPTED
    return code


def judge_run(run_dir: Path, slos: dict[str, Any], probing: ProbingPlan | None, *, broken: str | None,
              reason: StopReason | None, outcomes: dict[str, int] | None,
              partial_steps: list[str]) -> tuple[dict[str, Any] | None, int]:
    """The run's verdict (``slo.json``, ``junit.xml``; a search or sweep's ``capacity.json``) and
    the process's exit status (:func:`final_exit_status`)."""
    if probing is not None:
        from tokenswarm.orchestrate.probing import write_capacity  # numpy and the analysis: only for these plans

        write_capacity(run_dir, probing)
    interrupted = reason.value if reason is not None and reason.interrupted else None
    verdict, code = conclude(run_dir, slos, broken=broken, outcomes=outcomes, interrupted=interrupted)
    return verdict, final_exit_status(code, probing=probing is not None, reason=reason, partial_steps=partial_steps)


class EndingHost(Protocol):
    """What the ending reads of the run it ends (the :class:`~tokenswarm.orchestrate.controller.RunController`)."""

    env: Any
    is_master: bool
    fixed_users: bool

    @property
    def started(self) -> bool:
        """A run has opened its files (its manifest can take warnings)."""

    @property
    def finished(self) -> bool:
        """The run's stop has begun (records are being closed)."""

    @property
    def finalised(self) -> bool:
        """The final manifest is written."""

    @property
    def plan_done(self) -> bool:
        """The shaped plan ran its last step."""

    def warn(self, text: str) -> None:
        """A warning into the run's manifest."""

    def halt_users(self) -> None:
        """Local users send nothing more while the run winds down."""

    def stop(self) -> None:
        """Finalise the run (Locust's test_stop)."""


class RunEnding:
    """Why and how the current run ends: the stop reason, the guards, the circuit breaker and
    the hard stop. One per controller; :meth:`begin` readies it for each run."""

    def __init__(self, run: EndingHost) -> None:
        self.run = run
        #: why the run stopped (None while it runs); the manifest's stop_reason
        self.reason: StopReason | None = None
        self.force_end = False  # a shaped plan ends at the shape's next tick (Locust's normal path)
        self.breaker = CircuitBreaker()
        self.broken: str | None = None  # the circuit breaker's message, when it stopped the run
        self._stop_timeout_s = run.env.stop_timeout  # restored for a new run after a hard stop
        self._started_mono = 0.0
        self._signalled = False  # a signal is being handled: a second one leaves at once
        self._signals_installed = False
        self._guards: list[gevent.Greenlet] = []

    def begin(self) -> None:
        """A new run: no reason yet, a fresh breaker, Locust's ``stop_timeout`` as configured."""
        self.reason, self.force_end, self._signalled = None, False, False
        self.run.env.stop_timeout = self._stop_timeout_s  # a hard stop of the previous run set it to 0
        self._started_mono = time.monotonic()
        self.breaker, self.broken = CircuitBreaker(), None

    def arm(self, opts: Any, planned_s: Callable[[], float]) -> None:
        """The run's guards: ``--max-run-time`` (headless default: 1.5 x ``planned_s()`` + 2 min),
        ``-t`` over a shaped plan, and the SIGINT/SIGTERM handlers (once per process)."""
        cap = float(opts.tokenswarm_max_run_time or 0)
        if not cap and opts.headless:  # the default guard: a run that overstays its plan by far is stopped
            cap = planned_s() * 1.5 + 120.0
        if cap:
            self._guards.append(gevent.spawn_later(cap, self.max_run_time_reached, cap))
        if opts.run_time and not self.run.fixed_users:
            # Locust applies -t to a shape only after the shape ended: the controller caps the plan
            self._guards.append(gevent.spawn_later(float(opts.run_time), self.run_time_reached, float(opts.run_time)))
        if not self._signals_installed:
            install_signal_handlers(self.interrupt)
            self._signals_installed = True

    def disarm(self) -> None:
        """Cancel the guards (not the one running this: it is ending the run)."""
        for g in self._guards:
            if g is not gevent.getcurrent():
                g.kill(block=False)
        self._guards = []

    def plan_done(self) -> None:
        """The plan ran out (unless something else ended the run first)."""
        self.reason = self.reason or StopReason.PLAN_DONE

    def observe(self, outcome: str, http_status: int | None, error: str | None) -> None:
        """One record's outcome for the circuit breaker; it ends the run when every request fails alike."""
        message = self.breaker.observe(outcome, http_status, error)
        if message is None or self.run.finished:
            return
        self.broken = message
        self.reason = self.reason or StopReason.CIRCUIT_BREAKER
        print(f"tokenswarm: {redact(message)}", file=sys.stderr, flush=True)
        self.run.warn(message)
        self.run.halt_users()
        self.end_run()

    def max_run_time_reached(self, cap: float) -> None:
        if self.run.finished or self.reason is not None:
            return
        log.error("tokenswarm: maximum run time (%g s) reached; cancelling the requests in flight", cap)
        self.run.warn(f"stopped by the maximum run time guard (--max-run-time) after {cap:g} s: "
                      "requests in flight were cancelled")
        self.reason = StopReason.MAX_RUN_TIME
        cut_stop_timeout(self.run.env, is_master=self.run.is_master)
        self.end_run()

    def run_time_reached(self, run_time_s: float) -> None:
        if self.run.finished or self.reason is not None:
            return
        log.info("tokenswarm: run time (-t %g s) reached; stopping the run", run_time_s)
        self.run.warn(f"stopped by the run time limit (-t) after {run_time_s:g} s")
        self.reason = StopReason.RUN_TIME
        self.end_run()

    def interrupt(self, reason: StopReason) -> None:
        """Ctrl-C or SIGTERM: cancel what is in flight, finalise the run, exit with status 130.

        A second signal, or one while no run is going, leaves the way Locust's Ctrl-C does. A
        signal while the run is already ending (its plan, ``-t``, a guard) keeps that reason and
        only stops waiting for the streams in flight.
        """
        run, env = self.run, self.run.env
        if not run.started or run.finished or self._signalled:
            gevent.get_hub().parent.throw(KeyboardInterrupt())  # Locust's own way out (its shutdown)
            return
        self._signalled = True
        log.warning("tokenswarm: %s: cancelling the requests in flight and finalising the run", reason.name)
        cut_stop_timeout(env, is_master=run.is_master)
        if self.reason is None:
            run.warn(f"interrupted by {reason.name}: requests in flight were cancelled")
            self.reason = reason
            self.end_run()
        if env.web_ui is not None and not getattr(env.parsed_options, "headless", False):
            deadline = time.monotonic() + 30.0
            while not run.finalised and time.monotonic() < deadline:
                gevent.sleep(0.1)
            env.web_ui.stop()  # the process exits: Locust's shutdown, with our exit status

    def on_stopping(self) -> None:
        """Locust is stopping the run: know why. A stop tokenswarm did not ask for is the web UI's
        stop button or Locust's own quit, a hard stop."""
        run, env = self.run, self.run.env
        if not run.started or run.finished or self.reason is not None:
            return
        opts = env.parsed_options
        run_time = float(getattr(opts, "run_time", 0) or 0)
        if run.plan_done:
            self.reason = StopReason.PLAN_DONE
        elif run.fixed_users and run_time and time.monotonic() - self._started_mono >= run_time - 1.0:
            self.reason = StopReason.RUN_TIME
        else:
            web = env.web_ui is not None and not getattr(opts, "headless", False)
            self.reason = StopReason.WEB_UI_STOP if web else StopReason.LOCUST_QUIT
            run.warn(f"stopped by {'the web UI' if web else 'Locust'} before the plan ended: "
                     "requests in flight were cancelled")
            cut_stop_timeout(env, is_master=run.is_master)

    def on_quitting(self) -> None:
        """Locust is quitting: a run still going is stopped as an interruption (then finalised by the caller)."""
        run = self.run
        if run.started and not run.finished and self.reason is None:
            self.reason = StopReason.LOCUST_QUIT
            run.warn("Locust quit before the plan ended: requests in flight were cancelled")
            cut_stop_timeout(run.env, is_master=run.is_master)
            run.env.runner.stop()  # cancels the users' streams (records kept), then test_stop

    def end_run(self) -> None:
        if self.run.fixed_users:
            gevent.spawn(self.run.env.runner.quit)  # not from this greenlet: stopping kills the run's greenlets
        else:
            self.force_end = True  # the shape ends the test at its next tick, Locust's normal path
