"""The stream poller's sweep, in C against the Python loop: CPU per sweep (no network).

One :class:`tokenswarm.wire.poller.StreamPoller` holds ``--sockets`` local socket pairs (96: the
compare benchmark's streams), each with a handler that reads what is there, as a reader's
does. Before each sweep ``--ready`` of them get 40 bytes (a 3-token chunk is ~130; the size
does not matter to the sweep); then one ``_ready()`` is timed with the thread's CPU clock.
The C path (``_fastread.sweep_ready`` and ``real_minus_mono``) and the Python loop kept for
builds without the extension alternate, ``--sweeps`` each, over ``--rounds`` rounds, in one
process; each round prints both and their ratio, then the medians.

These are the sweep's own costs in a tight loop, with warm caches. In place, a busy worker's
sweep follows a wake-up of the event loop, and what it touches is cold: py-spy and thread-time
readings put a sweep at 30-50 µs there (docs/results/request-cost.md), so the difference
per sweep in place is larger than here, and the share of a run's CPU is that difference
times the sweeps a second (the manifest's ``timing.sweeps_count``).

    python benchmarks/sweep_cost.py
    python benchmarks/sweep_cost.py --ready 1 15 60 --sweeps 4000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costrun import stamp  # noqa: E402
from gevent.monkey import get_original  # noqa: E402

from tokenswarm.wire import poller  # noqa: E402
from tokenswarm.wire.poller import StreamPoller  # noqa: E402

_socketpair = get_original("socket", "socketpair")


def _sweeps(p: StreamPoller, pairs: list, ready: int, n: int, native: bool) -> float:
    """µs of thread CPU per sweep over ``n`` sweeps with ``ready`` sockets readable in each."""
    saved = poller._sweep_ready, poller._real_minus_mono
    if not native:
        poller._sweep_ready = poller._real_minus_mono = None
    try:
        spent = 0.0
        for i in range(n):
            first = (i * ready) % len(pairs)  # a different set each sweep, as streams take turns
            for k in range(ready):
                pairs[(first + k) % len(pairs)][1].send(b"x" * 40)
            t0 = time.thread_time()
            p._ready()
            spent += time.thread_time() - t0
        return spent / n * 1e6
    finally:
        poller._sweep_ready, poller._real_minus_mono = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sockets", type=int, default=96)
    ap.add_argument("--ready", type=int, nargs="+", default=[1, 15, 60],
                    help="sockets readable per sweep (mix.yaml at 96 streams: ~15 at a 2.5 ms period)")
    ap.add_argument("--sweeps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if poller._epoll is None:
        print("no epoll on this platform: the poller does not exist here")
        return 1
    if poller._sweep_ready is None:
        print("the C extension is not built (python setup.py build_ext --inplace) or TOKENSWARM_NATIVE=0")
        return 1
    if any(not 0 < r <= args.sockets for r in args.ready):
        ap.error(f"--ready: each value must be 1..--sockets ({args.sockets})")
    print(f"started {stamp()}")
    p = StreamPoller(time.perf_counter)
    pairs = [_socketpair() for _ in range(args.sockets)]
    for a, _b in pairs:
        a.setblocking(False)
        p.add(a.fileno(), lambda now, off, a=a: a.recv(4096))
    try:
        print(f"{args.sockets} sockets in the poller, {args.sweeps} sweeps per path and round, "
              f"{args.rounds} rounds, C and Python alternating")
        print(f"{'ready':>5} {'round':>5} {'C us/sweep':>11} {'Python us/sweep':>16} {'saved us':>9} {'Python / C':>10}")
        for ready in args.ready:
            c_us, py_us = [], []
            for r in range(args.rounds):
                c_us.append(_sweeps(p, pairs, ready, args.sweeps, native=True))
                py_us.append(_sweeps(p, pairs, ready, args.sweeps, native=False))
                print(f"{ready:>5} {r + 1:>5} {c_us[-1]:>11.2f} {py_us[-1]:>16.2f} {py_us[-1] - c_us[-1]:>9.2f} "
                      f"{py_us[-1] / c_us[-1]:>9.2f}x")
            c, py = statistics.median(c_us), statistics.median(py_us)
            print(f"{ready:>5} {'med':>5} {c:>11.2f} {py:>16.2f} {py - c:>9.2f} {py / c:>9.2f}x")
    finally:
        for a, b in pairs:
            p.remove(a.fileno())
            a.close()
            b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
