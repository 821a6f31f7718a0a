"""When the collector runs in a load-generating process (tokenswarm.load.gcpolicy).

Set-up's heap is frozen out of the collector's view and the generation-0 threshold raised. A
process's first set-up freezes without a full collection (it found ~120 unreachable objects in
23 ms of start-up); a later one in the same process collects first, because its garbage may hold
a previous run's objects. While tokenswarm's modules load and while a worker sets up, no
collection runs at all. Each case runs in a fresh interpreter: the collector is process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run_fresh(program: str) -> object:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_first_set_up_freezes_without_collecting_and_a_later_one_collects_first():
    first, second = run_fresh("""
        import gc, json
        from tokenswarm.load.gcpolicy import quiet_gc

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
    assert first == {"collected": 0, "frozen": True, "threshold": [20000, 20, 20]}
    assert second == {"collected": 1, "frozen": True, "threshold": [20000, 20, 20]}


PAUSE_PROGRAM = """
    import gc, json
    from tokenswarm.load.gcpolicy import paused_gc

    runs = []
    gc.callbacks.append(lambda phase, info: phase == "start" and runs.append(info["generation"]))

    class Node:
        pass

    def churn(n):  # enough cyclic allocations to pass every generation's threshold many times
        keep = []
        for i in range(n):
            a = Node(); a.me = a
            keep.append(a)
        return keep
    {body}
"""


def test_no_collection_runs_inside_a_pause_and_the_collector_is_enabled_again_after_it():
    result = run_fresh(PAUSE_PROGRAM.format(body="""
    with paused_gc():
        inside_enabled = gc.isenabled()
        kept = churn(200_000)
        inside = len(runs)
    after_enabled = gc.isenabled()
    churn(10)  # the first allocations after the pause run a collection it held back
    print(json.dumps({"inside": inside, "inside_enabled": inside_enabled, "after_enabled": after_enabled,
                      "after": runs[inside:]}))
    """))
    assert result["inside"] == 0 and result["inside_enabled"] is False
    assert result["after_enabled"] is True
    assert result["after"], "the collector runs again at the first allocations after the pause"


def test_a_freezing_pause_moves_what_it_built_out_of_view_so_no_full_collection_follows():
    result = run_fresh(PAUSE_PROGRAM.format(body="""
    frozen_before = gc.get_freeze_count()
    with paused_gc(freeze=True):
        kept = churn(200_000)
    frozen = gc.get_freeze_count() - frozen_before
    churn(10)
    print(json.dumps({"frozen": frozen, "after": runs, "enabled": gc.isenabled()}))
    """))
    assert result["frozen"] >= 200_000
    assert 2 not in result["after"] and result["enabled"] is True


def test_a_pause_restores_a_disabled_collector_and_an_error_inside_it_freezes_nothing():
    result = run_fresh(PAUSE_PROGRAM.format(body="""
    gc.disable()
    with paused_gc():
        pass
    stays_disabled = not gc.isenabled()
    gc.enable()
    try:
        with paused_gc(freeze=True):
            kept = churn(1000)
            raise ValueError("bad corpus")
    except ValueError:
        pass
    print(json.dumps({"stays_disabled": stays_disabled, "enabled": gc.isenabled(),
                      "frozen": gc.get_freeze_count()}))
    """))
    assert result == {"stays_disabled": True, "enabled": True, "frozen": 0}


def test_loading_the_locust_entry_point_runs_no_full_collection():
    result = run_fresh("""
        import gc, json
        import locust  # what Locust has loaded before it imports a locustfile
        full = []
        gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))
        import tokenswarm.locustfile
        for i in range(100_000):  # what a worker allocates next, before its set-up freezes the rest
            d = {"i": i}; d["me"] = d
        print(json.dumps({"full": len(full), "enabled": gc.isenabled(), "frozen": gc.get_freeze_count() > 0}))
    """)
    assert result == {"full": 0, "enabled": True, "frozen": True}
