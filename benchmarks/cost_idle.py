"""``request_cost.py --only idle``: what a worker costs while every stream waits for its first token."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

from costrun import stamp, start_client, tokenswarm_command, trees_of
from spec_workload import process_tree_cpu
from truthserver.testing import start_truth


def run_idle(args: argparse.Namespace, work: Path) -> None:
    """The per-second cost of a worker whose streams all wait: ``--streams`` requests open
    against a server that answers none of them for a minute (truth server ``--ttft-ms 60000``).

    Each tree (this one and each ``--src``), alternately, ``--repeat`` rounds: the process's CPU
    over a ``--seconds`` window that starts 8 s in (start-up and the sends are over by then).
    What a worker costs while its server is slow -- a long prefill, a queue -- is paid on every
    run whatever its traffic, and it is what a quiet arrival watcher or poller costs.
    """
    trees = trees_of(args)
    print(f"\n== idle: {args.streams} streams waiting for a first token ({stamp()})")
    shares: dict[str, list[float]] = {}
    with start_truth(None, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     "--ttft-ms", "60000", cpus="1", warm_up=False) as srv:
        for n in range(args.repeat):
            for tree, src in trees:
                cmd = tokenswarm_command(srv.base_url, "scenarios/qa.yaml", args.streams, args.seconds + 20,
                                         work / f"idle-{tree}-{n}", [], src)
                proc = start_client(cmd, {}, src, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    time.sleep(8.0)
                    c0, t0 = process_tree_cpu(proc.pid), time.monotonic()
                    time.sleep(args.seconds)
                    c1, t1 = process_tree_cpu(proc.pid), time.monotonic()
                finally:
                    proc.kill()
                    proc.wait()
                shares.setdefault(tree, []).append((c1 - c0) / (t1 - t0))
    print(f"finished {stamp()}")
    for tree, v in shares.items():
        print(f"{tree:<12} CPU share while every stream waits: median {statistics.median(v):.4f} of a core "
              f"(rounds: {', '.join(f'{x:.4f}' for x in v)})")
