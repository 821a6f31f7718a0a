"""The collector is kept out of the measuring loop (tokenswarm.load.setup.quiet_gc).

Set-up's heap is frozen out of the collector's view and the generation-0 threshold raised. A
process's first set-up freezes without a full collection (it found ~120 unreachable objects in
23 ms of start-up); a later one in the same process collects first, because its garbage may hold
a previous run's objects. Run in a fresh interpreter: the freeze is process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import gc, json
    from tokenswarm.load.setup import quiet_gc

    collections = []
    real_collect = gc.collect
    gc.collect = lambda *a: collections.append(a) or real_collect(*a)
    steps = []
    for run in (1, 2):
        class Cycle:  # garbage of a "previous run": a cycle only the collector frees
            pass
        c = Cycle(); c.me = c; del c
        before = len(collections)
        quiet_gc()
        steps.append({"collected": len(collections) - before, "frozen": gc.get_freeze_count() > 0,
                      "threshold": gc.get_threshold()})
    print(json.dumps(steps))
""")


def test_the_first_set_up_freezes_without_collecting_and_a_later_one_collects_first():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = json.loads(out.stdout.strip().splitlines()[-1])
    assert first == {"collected": 0, "frozen": True, "threshold": [20000, 20, 20]}
    assert second == {"collected": 1, "frozen": True, "threshold": [20000, 20, 20]}
