"""When the cyclic garbage collector runs in a load-generating process.

A worker builds a large heap once (Locust's and tokenswarm's modules, prompt corpora) and then
allocates short-lived, acyclic objects per event. Collections of that heap find nothing worth
their time, so the collector is paused while the heap is built (:func:`paused_gc`) and the heap
is then moved out of its view (:func:`quiet_gc`). Stdlib only: the entry point imports this
before anything else of tokenswarm.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_set_ups_count = 0  # quiet_gc calls in this process: the first needs no collection


@contextmanager
def paused_gc(*, freeze: bool = False) -> Iterator[None]:
    """No automatic collection inside the block; the collector's state is restored after it.

    Around tokenswarm's imports and a worker's set-up. A full collection that ran there walked the
    ~60,000 objects of Locust's heap (~30 ms of every worker's start-up) to free nothing, and the
    younger ones ran every few hundred allocations. Reference counting still frees what the block
    drops; a cycle dropped in it waits for a later collection.

    ``freeze``: move everything alive at the end of the block out of the collector's view before
    it runs again (imports: modules live as long as the process). Without it, the collection the
    block held back runs at its first allocation after it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def quiet_gc() -> None:
    """Keep the cyclic garbage collector out of the measuring loop.

    Set-up leaves a large, long-lived heap (prompt corpora, modules) that every full collection
    would walk again; ``gc.freeze`` moves it out of the collector's view. The hot path allocates
    a few short-lived, acyclic dicts per SSE event, so the default generation-0 threshold (700)
    ran a collection every ~100 events for nothing: it is raised, not disabled (cycles from
    user code are still collected).

    A process's first set-up freezes without a full collection first: at that point one walked
    ~60,000 objects to find ~120 unreachable ones (class-building leftovers of the imports,
    measured on ``mix.yaml``), 23 ms of every worker's start-up to free a few kilobytes, which
    are frozen with the rest instead. A later set-up in the same process (the web UI's next
    test, an in-process test suite) collects first: its garbage may hold a previous run's
    objects, sockets among them.
    """
    global _set_ups_count
    if _set_ups_count:
        gc.collect()
    _set_ups_count += 1
    gc.freeze()
    gc.set_threshold(20000, 20, 20)
