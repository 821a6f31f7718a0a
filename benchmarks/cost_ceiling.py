"""``request_cost.py --only ceiling``: a worker's load on one core at which accuracy still holds,
for short and long answers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from costrun import (
    ACCURACY_GOAL_MS,
    ROOT,
    accuracy,
    count,
    length_field,
    run_process,
    stamp,
    tokenswarm_command,
    window_figures,
)
from truthjoin import load_truth
from truthserver.testing import start_truth


def run_ceiling(args: argparse.Namespace, work: Path) -> None:
    """A worker's ceiling where accuracy holds: more streams until an error p99 passes the goal.

    Per answer length (``--ceiling-lengths``), closed-loop runs at ``--ceiling-streams`` in
    increasing order against the same truth server; the ceiling is the last run whose TTFT,
    chunk-gap and e2e error p99 all stayed within ``ACCURACY_GOAL_MS`` (requests/s and
    chunks/s of its steady window, and the share of its core it used). Stops at the first
    miss: more streams only miss by more.
    """
    print(f"\n== ceiling: the load at which accuracy holds on one core ({stamp()})")
    for length in args.ceiling_lengths:
        truth_path = work / f"ceiling-{length}-truth.jsonl"
        rows: list[dict[str, Any]] = []
        with start_truth(truth_path, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                         cpus="1") as srv:
            for streams in sorted(args.ceiling_streams):
                run = work / f"ceiling-{length}-{streams}"
                out = json.dumps({"dist": "fixed", "value": length})
                cmd = tokenswarm_command(srv.base_url, "scenarios/qa.yaml", streams, args.seconds, run,
                                         [f"traffic.classes.qa.{length_field(ROOT)}={out}",
                                          'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}'])
                row = run_process(f"{streams} streams", cmd, {}, args.seconds)
                row.update(run=run, streams=streams)
                srv.flush()
                truth = load_truth(truth_path)
                count(row, truth)
                accuracy(row, truth)
                a = row["accuracy"]
                row["holds"] = bool(a["joined"]) and all(
                    a[k] <= ACCURACY_GOAL_MS for k in ("ttft_err_p99_ms", "gap_err_p99_ms", "e2e_err_p99_ms"))
                rows.append(row)
                if not row["holds"]:
                    break
        print(f"\n{length}-token answers ({length / float(args.tokens_per_chunk.split('-')[0]):.0f} chunks), "
              f"finished {stamp()}")
        print(f"{'streams':>7} {'requests/s':>10} {'chunks/s':>9} {'CPU share':>9} {'TTFT err p99':>12} {'gap p99':>8} "
              f"{'e2e p99':>8}  holds")
        for r in rows:
            a = r["accuracy"]
            print(f"{r['streams']:>7} {window_figures(r, 10)}  {'yes' if r['holds'] else 'NO'}")
        ok = [r for r in rows if r["holds"]]
        if ok:
            best = ok[-1]
            print(f"ceiling ({length}-token answers): {best['window_requests'] / best['window_s']:.0f} requests/s, "
                  f"{best['window_chunks'] / best['window_s']:.0f} chunks/s at {best['window_cpu_s'] / best['window_s']:.2f} "
                  f"of a core, {best['streams']} streams" + ("" if len(ok) < len(rows) else
                                                            " (accuracy held at every load tried: offer more)"))
        else:
            print(f"ceiling ({length}-token answers): accuracy did not hold even at {rows[0]['streams']} streams")
