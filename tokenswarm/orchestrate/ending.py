"""How a run ends: why it stopped, whether that was an interruption, and the hard stop.

A run ends for one of the :class:`StopReason` s. Two kinds of end differ in what happens to
the requests still in flight:

* **graceful** (the plan ran out, ``-t``, the circuit breaker): Locust lets every user finish
  its current request for up to ``stop_timeout`` (``load.stop_timeout_s``);
* **hard** (the ``--max-run-time`` guard, Ctrl-C, SIGTERM, the web UI's stop): in-flight
  streams are cancelled at once -- each still becomes a record, with outcome ``cancelled``
  (see :func:`tokenswarm.wire.client.stream_call`) -- so the process ends within a few
  seconds whatever ``stop_timeout`` says.

An *interruption* (Ctrl-C, SIGTERM, the web UI's stop, or Locust quitting on its own) marks the
manifest ``complete: false`` and makes the process exit with :data:`EXIT_INTERRUPTED`, as a
study does. Any stop before the plan's own end (``-t`` included, unless it is the whole plan
of a fixed ``-u`` run) leaves the step that was running marked ``partial`` in the manifest.
"""

from __future__ import annotations

import enum
import signal
from typing import Any, Callable

#: The exit status of an interrupted run (128 + SIGINT, the shell's convention; studies use it too).
EXIT_INTERRUPTED = 130
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
    import gevent

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
