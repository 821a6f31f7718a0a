"""A local worker ends with the master that forked it.

Workers started by ``--processes`` (``tokenswarm run --workers N``) are the master's
children. When the master ends without telling them (killed, or a quit message they read
late), Locust's workers wait 60 s for a heartbeat, re-parented to PID 1, holding the
terminal's pipe open: a piped CI step took 84 s for a 6 s load. Watching the parent's PID
ends them within a poll interval instead. Remote workers (``--worker`` on other hosts) are
told to quit by the master and otherwise fall back to Locust's heartbeat timeout.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import gevent

log = logging.getLogger("tokenswarm")

#: How often a local worker looks at its parent's PID (seconds).
PARENT_POLL_S = 0.5


def watch_parent(on_gone: Callable[[], None], *, getppid: Callable[[], int] = os.getppid,
                 sleep: Callable[[float], object] = gevent.sleep, poll_s: float = PARENT_POLL_S) -> None:
    """Call ``on_gone`` once the process that was our parent at the call has ended.

    Blocks (run it in a greenlet). A process whose parent ended is re-parented, so its
    parent PID changes; that is the whole test (no signal, no platform-specific call).
    """
    parent = getppid()
    while getppid() == parent:
        sleep(poll_s)
    log.warning("tokenswarm: the master process (pid %d) has ended; this local worker stops too", parent)
    on_gone()


def is_local_worker(options: object) -> bool:
    """True for a worker that Locust forked from the master (``--processes``)."""
    return bool(getattr(options, "worker", False) and getattr(options, "processes", None))
