"""What this machine charges a process for waking from idle, and a switch that keeps its cores awake.

A load generator at a sixth of a core sleeps most of the time: tokenswarm's poller wakes every
2-2.5 ms to sweep its sockets, plain Locust on every arrival (~1 ms apart at 96 streams). On some
virtual machines the first work after an idle of more than ~1.5 ms runs several times slower
than the same work done a moment later: the host let the physical core sleep deeply (its caches
emptied) or ran another guest on it. The process is charged for that slowness as CPU time, so a
client's CPU per chunk reads differently from one machine, or hour, to the next, and two clients
with different idle rhythms can be charged differently (on 2026-12-07 tokenswarm and plain Locust
were charged alike: both ~20-25 % more than with the charge taken out). Measured on this project's
2-core VM on 2026-12-07: 34 µs of work cost ~49 µs right after a 1 ms idle and ~200 µs after
2-2.5 ms; with the guest kept out of halt (``/dev/cpu_dma_latency`` held at 0) ~50 µs after any
idle up to 5 ms.

:func:`probe` measures it in a child process pinned where the clients run: a fixed piece of
Python work (dict reads over a ~2 MB working set, like a client's per-event work) timed with the
thread's CPU clock right after idles of each length, and back to back. :func:`summarize` (pure)
gives the means and each idle's ratio to the back-to-back work; ``request_cost.py`` prints the
line at the start and end of every run, so each dated table carries the machine's state.

:func:`warm_core` is what ``pyperf system tune`` does for the same reason: it holds
``/dev/cpu_dma_latency`` at 0 while the block runs, so an idle CPU polls instead of halting.
The polling is charged to the idle task, not to any client; every client then pays only for its
own work. It needs root; the setting ends when the block closes its file.

    python benchmarks/hostidle.py                 # this machine's figures now
    python benchmarks/hostidle.py --warm-core     # and with the cores kept awake
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the idles probed (ms): under and over the ~1.5 ms at which the VM above turned slow, and the
#: 2.5 ms of a busy tokenswarm poller's sweeps
IDLE_MS = (0.5, 2.5)
#: samples per idle length (the probe takes ~2 s with the defaults)
SAMPLES = 300
DMA_LATENCY = Path("/dev/cpu_dma_latency")


def _work_unit() -> Any:
    """A fixed piece of work: 400 dict reads at random over 20,000 small dicts (~2 MB)."""
    data = [{"a": i, "b": str(i), "c": [i, i + 1]} for i in range(20_000)]
    rng = random.Random(1)
    picks = [rng.randrange(len(data)) for _ in range(400)]

    def unit() -> int:
        total = 0
        for i in picks:
            d = data[i]
            total += d["a"] + len(d["b"]) + d["c"][1]
        return total

    return unit


def measure(idle_ms: Sequence[float] = IDLE_MS, samples: int = SAMPLES) -> dict[str, Any]:
    """Run the probe in this process: CPU µs of the work back to back and after each idle.

    In ten rounds, each a burst of back-to-back work (its first ten units not counted: they
    follow the previous round's idles) and then a tenth of each idle's samples, so that a drift
    of the machine during the probe reaches both alike.
    """
    unit = _work_unit()
    clock = time.thread_time_ns
    for _ in range(200):  # the interpreter's caches and the working set, before anything counts
        unit()
    hot: list[float] = []
    after: dict[str, list[float]] = {f"{ms:g}": [] for ms in idle_ms}
    rounds = 10
    for r in range(rounds):
        for i in range(10 + max(1, samples // rounds)):
            t0 = clock()
            unit()
            if i >= 10:
                hot.append((clock() - t0) / 1000.0)
        for ms in idle_ms:
            runs = after[f"{ms:g}"]
            for _ in range(samples // rounds + (r < samples % rounds)):
                time.sleep(ms / 1000.0)
                t0 = clock()
                unit()
                runs.append((clock() - t0) / 1000.0)
    return {"hot_us": hot, "after_idle_us": after}


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Means of :func:`measure`'s samples (a process is charged the mean, slow wake-ups
    included; they come and go with the host's load, so a median can miss them) and each
    idle's ratio to the back-to-back work."""
    hot = statistics.fmean(raw["hot_us"])
    if hot <= 0:
        raise ValueError("host idle probe: the back-to-back work took no CPU time (clock too coarse?)")
    after = {ms: statistics.fmean(v) for ms, v in raw["after_idle_us"].items()}
    return {"hot_us": hot, "after_idle_us": after, "ratio": {ms: v / hot for ms, v in after.items()}}


def line(summary: dict[str, Any], *, warm_core: bool = False) -> str:
    """One line for a benchmark's output."""
    parts = ", ".join(f"after {ms} ms idle {summary['after_idle_us'][ms]:.0f} µs ({summary['ratio'][ms]:.1f}x)"
                      for ms in summary["after_idle_us"])
    state = "cores kept awake (cpu_dma_latency 0)" if warm_core else "cores idle as the machine sets"
    return (f"host idle probe ({state}): the same work back to back {summary['hot_us']:.0f} µs of CPU, {parts}; "
            "a ratio well above 1 charges every sleeping client for its wake-ups (benchmarks/hostidle.py)")


def probe(idle_ms: Sequence[float] = IDLE_MS, samples: int = SAMPLES) -> dict[str, Any]:
    """:func:`measure` in a child process placed as the cost benchmarks place their clients
    (``costrun.start_client``: core 0), summarised."""
    from costrun import ROOT, start_client  # imported here: the child (--raw) needs none of it

    cmd = [sys.executable, str(HERE / "hostidle.py"), "--raw", "--samples", str(samples),
           "--idle-ms", *(f"{ms:g}" for ms in idle_ms)]
    proc = start_client(cmd, {}, ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode:
        raise RuntimeError(f"host idle probe exited with {proc.returncode}: {err[-2000:]}")
    return summarize(json.loads(out))


@contextlib.contextmanager
def warm_core(enabled: bool = True, path: Path = DMA_LATENCY) -> Iterator[None]:
    """Hold the CPU wake-up latency request at 0 while the block runs (idle CPUs poll, not halt).

    SystemExit naming the file and the reason when it cannot be held (not root, no such device).
    """
    if not enabled:
        yield
        return
    try:
        f = open(path, "wb", buffering=0)  # held open for the block: closing it ends the request
    except OSError as exc:
        raise SystemExit(f"--warm-core: cannot open {path} ({exc.strerror}); it needs root and a Linux kernel "
                         "with PM QoS") from exc
    try:
        f.write(struct.pack("i", 0))
        yield
    finally:
        f.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle-ms", type=float, nargs="+", default=list(IDLE_MS))
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--warm-core", action="store_true", help="measure with /dev/cpu_dma_latency held at 0 as well")
    ap.add_argument("--raw", action="store_true", help="measure in this process and print the samples as JSON")
    args = ap.parse_args(argv)
    if args.samples < 1 or any(ms < 0 for ms in args.idle_ms):
        ap.error("--samples must be >= 1 and --idle-ms >= 0")
    if args.raw:
        print(json.dumps(measure(args.idle_ms, args.samples)))
        return 0
    print(line(probe(args.idle_ms, args.samples)))
    if args.warm_core:
        with warm_core():
            print(line(probe(args.idle_ms, args.samples), warm_core=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
