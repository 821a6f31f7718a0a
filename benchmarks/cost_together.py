"""``request_cost.py --only together``: two or more tokenswarm trees at once, to compare their CPU
when the difference is smaller than the machine's drift.

The other modes run one client at a time, alone on core 0, A B A B. On a virtual machine the
speed of a core drifts between runs: over one afternoon eight consecutive starts of the same
work ranged up to 1.45x in CPU, and the pairs of a `mix.yaml` comparison spread 1.47-2.41x. A
change worth 2-5 % cannot be read from such rounds. Here every tree (this checkout and each
``--src``) runs at the same time on core 0, each with ``--streams`` users on the same scenario
and seed, against one truth server on core 1, so whatever the machine does to one it does to
the others. The order in which they start rotates from round to round.

Each round prints, per tree: requests and chunks (its records), whole-process CPU (``wait4``
of the process) per request and per chunk, its share of a core over a steady window (its
CPU-time clock, sampled every 0.1 s), and that share against this tree's in the same round;
then the median of each tree's per-round ratios. The clients share a core, so their timing
accuracy is not what a client alone has (the other modes report it): this mode reads CPU only.

    python benchmarks/request_cost.py --only together --src /path/to/other/checkout --repeat 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from costrun import cpu_at, process_cpu_clock_s, stamp, start_client, tokenswarm_command, trees_of
from spec_workload import steady_window
from truthserver.testing import start_truth


def _records(run: Path) -> tuple[int, int]:
    """(requests, chunks) in a run's records."""
    path = run / "records.jsonl"
    if not path.exists():
        return 0, 0
    requests = chunks = 0
    for line in path.read_bytes().splitlines():
        if line:
            r = orjson.loads(line)
            requests += 1
            chunks += len(r.get("chunk_offsets_ms") or ())
    return requests, chunks


def one_round(args: argparse.Namespace, trees: list[tuple[str, Path]], base_url: str, work: Path,
              n: int) -> list[dict[str, Any]]:
    """Every tree's process started at once; their figures once all have exited (in ``trees`` order)."""
    k = n % len(trees)
    order = trees[k:] + trees[:k]  # who starts first rotates
    procs: dict[str, Any] = {}
    for label, src in order:
        run = work / f"together-{n}-{label}"
        cmd = tokenswarm_command(base_url, args.classes_scenario, args.streams, args.seconds, run, [], src=src)
        err = (work / f"together-{n}-{label}.stderr").open("w")  # Locust's summary and logs, read on failure
        procs[label] = (start_client(cmd, {}, src, stdout=subprocess.DEVNULL, stderr=err), run)
        err.close()  # the child holds its own copy
    wait, window = steady_window(args.seconds)  # the window the one-at-a-time modes read
    marks: dict[str, list[tuple[float, float]]] = {label: [] for label in procs}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = time.monotonic()
            for label, (proc, _run) in procs.items():
                cpu = process_cpu_clock_s(proc.pid)
                if cpu is not None:
                    marks[label].append((now, cpu))
            done.wait(0.1)

    start = time.monotonic()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rows = []
    usage: dict[str, float] = {}
    try:
        for label, (proc, _run) in procs.items():
            _pid, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            usage[label] = ru.ru_utime + ru.ru_stime
        # 1: Locust counted a failed request; the rows show the counts
        failed = [label for label, (proc, _run) in procs.items() if proc.returncode not in (0, 1)]
        if failed:
            raise SystemExit("\n".join(
                f"together, round {n + 1}: {label} failed ({procs[label][0].returncode}):\n"
                + (work / f"together-{n}-{label}.stderr").read_text()[-1500:] for label in failed))
    finally:
        done.set()
        sampler.join()
        for proc, _run in procs.values():  # a wait interrupted (Ctrl-C): leave no client behind
            if proc.returncode is None:
                proc.kill()
                proc.wait()
    t0, t1 = start + wait, start + wait + window
    for label, _src in trees:
        _proc, run = procs[label]
        c0, c1 = cpu_at(marks[label], t0), cpu_at(marks[label], t1)  # interpolated at the window's ends
        share = (c1 - c0) / (t1 - t0) if c0 is not None and c1 is not None else float("nan")
        requests, chunks = _records(run)
        rows.append({"label": label, "requests": requests, "chunks": chunks, "cpu_s": usage[label], "share": share})
    return rows


def run_together(args: argparse.Namespace, work: Path) -> None:
    trees = trees_of(args)
    if len(trees) < 2:
        raise SystemExit("--only together compares trees: give at least one --src checkout")
    names = [label for label, _src in trees]
    if len(set(names)) != len(names):
        raise SystemExit(f"--only together: two trees share a folder name ({', '.join(names)}); rename one")
    first = trees[0][0]
    print(f"\n== together: {', '.join(names)} at once on core 0, {args.streams} streams each, "
          f"{args.classes_scenario}, {args.seconds:g} s, {args.repeat} rounds ({stamp()})")
    print(f"{'round':>5} {'tree':<14} {'requests':>8} {'chunks':>8} {'whole us/req':>12} {'whole us/chunk':>14} "
          f"{'steady core':>11} {'steady / ' + first:>16}")
    ratios: dict[str, list[float]] = {label: [] for label in names}
    with start_truth(None, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     cpus="1") as srv:
        for n in range(args.repeat):
            rows = one_round(args, trees, srv.base_url, work, n)
            base = rows[0]["share"]
            for r in rows:
                ratio = r["share"] / base
                ratios[r["label"]].append(ratio)
                req, chunks = r["requests"], r["chunks"]
                print(f"{n + 1:>5} {r['label']:<14} {req:>8d} {chunks:>8d} "
                      f"{r['cpu_s'] / req * 1e6 if req else float('nan'):>12.0f} "
                      f"{r['cpu_s'] / chunks * 1e6 if chunks else float('nan'):>14.1f} "
                      f"{r['share']:>11.4f} {ratio:>15.3f}x", flush=True)
    for label in names[1:]:
        rs = ratios[label]
        print(f"steady CPU share, {label} / {first}: median {statistics.median(rs):.3f}x "
              f"(rounds {min(rs):.3f}-{max(rs):.3f}x)")
    print(f"finished {stamp()}")

