"""A local worker ends with the master that forked it.

Workers started by ``--processes`` (``tokenswarm run --workers N``) are the master's
children. When the master ends without telling them (killed, or a quit message they read
late), Locust's workers wait 60 s for a heartbeat, re-parented to PID 1, holding the
terminal's pipe open: a piped CI step took 84 s for a 6 s load. Watching the parent's PID
ends them within a poll interval instead. Remote workers (``--worker`` on other hosts) are
told to quit by the master and otherwise fall back to Locust's heartbeat timeout.

A worker's last messages (its final records, its count, Locust's "quit") are sent without
blocking and queued for libzmq's I/O thread; at interpreter exit pyzmq does not terminate its
contexts, so a worker that exits milliseconds after sending can drop them when that thread was
not scheduled in time (seen on a loaded CI machine: 10 records lost, the run failed).
:class:`ExitFlush` closes the worker's socket with a bounded linger at exit instead.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any, Callable

import gevent

log = logging.getLogger("tokenswarm")

#: How often a local worker looks at its parent's PID (seconds).
PARENT_POLL_S = 0.5

#: The PID of the process that forked this one (None: not forked since this module was imported).
#: Locust imports the locustfile, and with it tokenswarm, in the master before it forks the
#: ``--processes`` workers, so in such a worker this is the master's PID from the fork on. Read as
#: the parent at the worker's set-up instead, it could already be PID 1: a master killed between
#: the worker's connection and its set-up went unnoticed, and the worker ran on, re-parented
#: (seen in CI98, 2026-12-08: alive 33 minutes after its master).
_forked_from: int | None = None
_pid_at_fork: int | None = None  # the forking process's PID, noted in it just before each fork


def _note_forker() -> None:
    global _pid_at_fork
    _pid_at_fork = os.getpid()


def _child_knows_forker() -> None:
    # the value the parent noted just before this fork: exact, whatever happened to it since;
    # a later fork of this process notes its own PID for its child and leaves this one alone
    global _forked_from
    _forked_from = _pid_at_fork


os.register_at_fork(before=_note_forker, after_in_child=_child_knows_forker)

#: How long a worker's exit waits, at most, for its queued messages to reach the master (seconds).
EXIT_FLUSH_LINGER_S = 5.0


def master_pid(*, forked_from: int | None = None, getppid: Callable[[], int] = os.getppid) -> int:
    """The PID of the master that forked this local worker: the process that forked this one
    (``forked_from``, default: noted at the fork). Not forked since tokenswarm was imported, the
    parent now is the best there is."""
    forked_from = _forked_from if forked_from is None else forked_from
    return forked_from if forked_from is not None else getppid()


def parent_unchanged(getppid: Callable[[], int] = os.getppid, *, parent: int | None = None) -> Callable[[], bool]:
    """A check that is true while ``parent`` (default: our parent now) is still our parent."""
    parent = getppid() if parent is None else parent
    return lambda: getppid() == parent


def watch_parent(on_gone: Callable[[], None], *, parent: int | None = None, getppid: Callable[[], int] = os.getppid,
                 sleep: Callable[[float], object] = gevent.sleep, poll_s: float = PARENT_POLL_S) -> None:
    """Call ``on_gone`` once ``parent`` (default: our parent at the call) is no longer our parent:
    at once if it already ended before the call.

    Blocks (run it in a greenlet). A process whose parent ended is re-parented, so its
    parent PID changes; that is the whole test (no signal, no platform-specific call).
    """
    parent = getppid() if parent is None else parent
    still_parent = parent_unchanged(getppid, parent=parent)
    while still_parent():
        sleep(poll_s)
    log.warning("tokenswarm: the master process (pid %d) has ended; this local worker stops too", parent)
    on_gone()


def is_local_worker(options: object) -> bool:
    """True for a worker that Locust forked from the master (``--processes``)."""
    return bool(getattr(options, "worker", False) and getattr(options, "processes", None))


class ExitFlush:
    """At exit, deliver what a worker queued for its master, waiting at most ``linger_s``.

    ``runner`` is Locust's worker runner; its ``client`` (an RPC socket with its own zmq
    context) is read at exit, since a reconnect replaces it. Destroying that context with a
    linger closes the socket once its queue is sent (or the linger ends) and terminates the
    context, which joins libzmq's I/O thread: nothing queued is dropped by the exit itself.
    When the master is known to be gone (``master_alive`` says so at exit) there is no one to
    deliver to, and the exit is immediate.
    """

    def __init__(self, runner: Any, linger_s: float = EXIT_FLUSH_LINGER_S,
                 master_alive: Callable[[], bool] | None = None) -> None:
        """``master_alive``, where the worker can tell (a local worker: its parent's PID), is asked
        at exit: a master that ended while the worker was stopping gets no wait either."""
        self.runner = runner
        self.linger_s = linger_s
        self.master_alive = master_alive
        self.done = False

    def install(self) -> "ExitFlush":
        """Register :meth:`flush` to run at interpreter exit; returns ``self``."""
        atexit.register(self.flush)
        return self

    def flush(self) -> None:
        """Close the worker's socket with the linger and terminate its context (once)."""
        if self.done:
            return
        self.done = True
        socket = getattr(getattr(self.runner, "client", None), "socket", None)
        if socket is None or socket.closed:
            return
        gone = self.master_alive is not None and not self.master_alive()
        try:
            socket.context.destroy(linger=0 if gone else int(self.linger_s * 1000))
        except Exception as exc:  # at exit nothing can be retried; say what happened, exit anyway
            log.warning("tokenswarm: the worker's last messages may not have reached the master: %s", exc)
