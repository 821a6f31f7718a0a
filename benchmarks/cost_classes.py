"""``request_cost.py --only classes``: a mixed scenario's tasks run one at a time, to find which
task's requests cost what.

Each row is one tokenswarm process on ``--classes-scenario`` (``scenarios/mix.yaml``) with every
other task's weight set to 0, ``--streams`` users for ``--seconds`` against the truth server,
then the scenario as shipped; with ``--classes-no-think`` each task that has a think time runs a
second time with it set to 0. The rows print whole-process and steady-window CPU per request
and per chunk, start-up CPU and requests/s: a task that costs more per request only with its
think time is paying for the streams it leaves idle (fewer active streams per turn of the event
loop), not for its own work.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from costrun import ROOT, alone, count, run_process, stamp, tokenswarm_command
from truthjoin import load_truth
from truthserver.testing import start_truth


def thinks(task: Any) -> bool:
    """Whether a task waits between its requests or turns: its think time, floored at 0 by the
    scenario, is ever above 0 exactly when its mean is."""
    return task.think_time_s.mean > 0


def variants(scenario: Path, no_think: bool) -> list[tuple[str, list[str]]]:
    """(label, ``--set`` overrides) of each row: every task alone, then the scenario as shipped."""
    from tokenswarm.workload.scenario import load_scenario

    sc = load_scenario(scenario)
    tasks = sc.traffic.classes
    names = [t.name for t in tasks]
    rows: list[tuple[str, list[str]]] = []
    for task in tasks:
        sets = alone(names, task.name)
        rows.append((task.name, sets))
        if no_think and thinks(task):
            rows.append((f"{task.name} (no think)",
                         [*sets, f"traffic.classes.{task.name}.think_time_s={{dist: fixed, value: 0}}"]))
    rows.append(("as shipped", []))
    return rows


def row_figures(row: dict[str, Any]) -> str:
    """One printed row: requests, chunks, CPU per request and per chunk (whole and window), start-up."""
    req, chunks = row["requests"], row["chunks"]
    whole_us_req = row["whole_cpu_s"] / req * 1e6 if req else float("nan")
    window_us_req = row["window_cpu_s"] / row["window_requests"] * 1e6 if row["window_requests"] else float("nan")
    return (f"{req:>8d} {req / row['seconds']:>7.0f} {chunks / req if req else 0:>10.1f} "
            f"{whole_us_req:>12.0f} {window_us_req:>13.0f} {row['us_per_chunk'] or 0:>14.1f} "
            f"{row['window_us_per_chunk'] or 0:>15.1f} {row['startup_cpu_s']:>10.3f}")


def run_classes(args: argparse.Namespace, work: Path) -> None:
    """Every task of the scenario alone, then the scenario as shipped, ``--repeat`` rounds."""
    scenario = ROOT / args.classes_scenario
    rows = variants(scenario, args.classes_no_think)
    truth_path = work / "classes-truth.jsonl"
    print(f"\n== classes: each task of {args.classes_scenario} alone, {args.streams} streams, {args.seconds:g} s "
          f"({stamp()})")
    print(f"{'task':<26} {'requests':>8} {'req/s':>7} {'chunks/req':>10} {'whole us/req':>12} "
          f"{'window us/req':>13} {'whole us/chunk':>14} {'window us/chunk':>15} {'startup s':>10}")
    with start_truth(truth_path, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     cpus="1") as srv:
        for n in range(args.repeat):
            for i, (label, sets) in enumerate(rows):
                run = work / f"classes-{n}-{i}"
                row = run_process(label, tokenswarm_command(srv.base_url, args.classes_scenario, args.streams,
                                                            args.seconds, run, sets), {}, args.seconds)
                srv.flush()
                count(row, load_truth(truth_path))
                row["seconds"] = args.seconds
                print(f"{label:<26} {row_figures(row)}", flush=True)
    print(f"finished {stamp()}")
