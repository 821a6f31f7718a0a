"""``request_cost.py --only startup``: what a client process costs before its first request,
and from start to exit on a run too short for anything else to weigh.

Each round runs every tree (this one and each ``--src``, in an order that turns by one each
round) and then plain Locust (``baseline_locustfile.py`` with the scenario's own bodies), each
with one user for ``--startup-seconds`` against the truth server, on ``--classes-scenario``
(``scenarios/mix.yaml``: every task's prompt source, the schema validator, the code corpus).
Per process: the CPU it had spent when the server received its first request (its CPU-time
clock read every 5 ms and interpolated, to the nanosecond where ``/proc`` counts 10 ms ticks; as
every comparison row's start-up) and its whole-process CPU (``getrusage`` of the waited tree).
tokenswarm's start-up is Locust's plus its own (the plugin, the scenario, the prompt sources), so
the baseline's figure is the floor a Locust plugin can reach.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from costrun import (
    baseline_bodies_env,
    baseline_command,
    count,
    in_turn,
    run_process,
    stamp,
    tokenswarm_command,
    trees_of,
)
from truthjoin import load_truth
from truthserver.testing import start_truth


def run_startup(args: argparse.Namespace, work: Path) -> None:
    """Start-up and whole-process CPU of one-user runs, per tree and plain Locust, alternately."""
    trees = trees_of(args, "tokenswarm")
    scenario = args.classes_scenario
    seconds = args.startup_seconds
    truth_path = work / "startup-truth.jsonl"
    rows: list[dict[str, Any]] = []
    print(f"\n== startup: one user for {seconds:g} s on {scenario}, {args.repeat} rounds ({stamp()})")
    with start_truth(truth_path, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     cpus="1") as srv:
        bodies_env = baseline_bodies_env(args, work / "startup-bodies.jsonl", scenario, srv.base_url, 1, 64)
        for n in range(args.repeat):
            for tree, src in in_turn(trees, n):
                run = work / f"startup-{tree}-{n}"
                row = run_process(tree, tokenswarm_command(srv.base_url, scenario, 1, seconds, run, [], src), {},
                                  seconds, src)
                rows.append(row)
            rows.append(run_process("baseline", baseline_command(srv.base_url, 1, seconds),
                                    {"BENCH_MODEL": "truth", **bodies_env}, seconds))
        srv.flush()
    truth = load_truth(truth_path)
    for r in rows:
        count(r, truth)
    print(f"finished {stamp()}")
    print("\n".join(table(rows, [t for t, _src in trees] + ["baseline"])))


def table(rows: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """One line per client (in ``labels`` order): its start-up and whole-process CPU, the median
    and every round's, and the start-up beyond the last label's (the baseline's)."""
    floor = statistics.median(r["startup_cpu_s"] for r in rows if r["label"] == labels[-1])
    out = [f"{'client':<14} {'start-up s of CPU (median; rounds)':<44} {'beyond baseline s':>17}  "
           f"{'whole process s (median; rounds)'}"]
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        first = [r["startup_cpu_s"] for r in mine]
        whole = [r["whole_cpu_s"] for r in mine]
        out.append(f"{label:<14} {_figures(first):<44} {statistics.median(first) - floor:>17.3f}  {_figures(whole)}")
    return out


def _figures(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"
