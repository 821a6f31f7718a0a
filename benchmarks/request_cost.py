"""The generator's CPU per request and per chunk, apart; and its cost against plain Locust on shipped traffic.

Everything runs against the uvicorn truth server (``benchmarks/truthserver``) pinned to core 1,
each client alone on core 0, as a whole process (start-up to exit, ``getrusage`` of the waited
process tree) and over a steady mid-run window (process-tree CPU between two moments).

**Split** (``--lengths``, default 12 48 192 tokens): the same server (one event every
``--step-ms`` 5 ms with ``--tokens-per-chunk`` 3 tokens), the same ``--streams`` (96), the
prompts of ``scenarios/qa.yaml``, answers of a fixed length (``ignore_eos``), lengths run
alternately (L1 L2 L3 L1 L2 L3 ...). Each run's CPU is a sum of a fixed part, a cost per request
and a cost per chunk; a least-squares fit over the runs (``numpy.linalg.lstsq``) gives

* whole process: ``CPU s = start-up + a x requests + b x chunks``;
* steady window: ``CPU share of a core = per-second + a x requests/s + b x chunks/s``.

Requests and chunks come from the server's truth log (what it sent this client), not from the
client. The fits are printed with the residual and the per-run table so a poor fit shows.
With ``--split-baseline`` plain Locust (``baseline_locustfile.py``, sending the same request
bodies) runs at every length after the trees in each round and gets the same fits, and a line
gives plain Locust's cost over tokenswarm's, per request and per chunk: a comparison that holds
on any machine, where the 250 µs goal moves with the machine's speed.

**Against plain Locust** (``--compare``): ``benchmarks/baseline_locustfile.py`` (FastHttpUser,
``readline`` and ``json.loads`` per event) and tokenswarm on the shipped scenarios *as shipped*
(their prompts, length distributions, task mix, records and live statistics on; only the load
plan becomes ``--streams`` users for ``--seconds``), A B A B:

* ``qa``: ``scenarios/qa.yaml``, 3-token chunks every 5 ms;
* ``mix``: ``scenarios/mix.yaml``, 3-token chunks every 5 ms;
* ``one-token``: ``scenarios/qa.yaml`` at ``--one-token-streams`` (256), one-token chunks every 10 ms.

**For which traffic**: ``CASE:TASK`` runs a case with one task of its scenario alone (every other
task's weight 0 for both clients: the same prompts, lengths and think times as in the mix), and
``CASE:all`` each task in turn -- ``--cases mix:all`` shows which of ``mix.yaml``'s tasks hold the
ratio and which pull it down (short answers weigh the per-request cost, think times leave streams
idle). With more than one case, a table of every case's ratios ends the comparison.

The baseline sends **the same request bodies** tokenswarm sends in that case
(``--baseline-bodies scenario``, the default): before the first round,
``benchmarks/bench_bodies.py`` builds them from the scenario with tokenswarm's own workload
code (seed, prompts, ``max_tokens``, messages -- a conversation's first turn --,
``response_format``, sampling) into a JSONL file the baseline cycles through
(``BENCH_BODIES_FILE``), pre-serialised. With ``--baseline-bodies plain`` (the runs before
2026-12-02 14:00 UTC) it sends the two-word prompt "benchmark please" and asks for the mean
answer length tokenswarm got in the same round; on ``mix.yaml`` that was unfair to
tokenswarm: its 1,000-8,000-token documents take the server longer to prefill, so tokenswarm
ran a third of the baseline's requests. Ratios are baseline /
tokenswarm whole-process CPU per chunk (the goal: >= 2, i.e. tokenswarm at most half), with
tokenswarm's timing errors against the server's kernel-stamped truth over the steady window:
TTFT, chunk gap and e2e error p99 (goal: <= 1 ms each). Each client's kernel (system) CPU per
chunk is printed too, and the ratio of the user-space CPU alone: reading a chunk costs every
client a system call and, on loopback, the ACK that read sends, which no client code removes.
So is each client's start-up: the CPU its process had spent when the server received its
first request (its CPU-time clock read every 5 ms, interpolated), part of the whole-process figure.

With ``--src DIR`` (a checkout with its C extension built in place) the comparison runs that
tree's tokenswarm too, in every round, between this tree's and the baseline (A B C A B C), and
prints each tree's ratio: a change's effect on the ratio, measured in one run.

Every table is printed with the date, the load average before and after, and the command.
On a shared machine absolute figures are noisy; ratios from one run are what to quote.

    python benchmarks/request_cost.py                                  # split and comparison
    python benchmarks/request_cost.py --only split --seconds 15 --repeat 2
    python benchmarks/request_cost.py --only split --split-baseline --seconds 15 --repeat 2
    python benchmarks/request_cost.py --only compare --cases qa one-token --seconds 20
    python benchmarks/request_cost.py --only compare --cases qa mix --src /tmp/before
    python benchmarks/request_cost.py --only compare --cases mix:all --seconds 15 --repeat 2
    python benchmarks/request_cost.py --only ceiling --seconds 15
    python benchmarks/request_cost.py --only idle --seconds 10 --repeat 2 --src /tmp/before
    python benchmarks/request_cost.py --only classes --seconds 20 --classes-no-think
    python benchmarks/request_cost.py --only startup --repeat 5 --src /tmp/before

**Idle** (``--only idle``): the per-second cost of a worker whose ``--streams`` requests all wait
for a first token (the truth server holds them for a minute): its CPU share over ``--seconds``,
8 s in, per tree, alternately. What a worker spends while its server is slow is paid on every
run; a quiet worker should cost next to nothing.

**Classes** (``--only classes``): each task of ``--classes-scenario`` (``scenarios/mix.yaml``)
alone, then the scenario as shipped, one process each; with ``--classes-no-think`` a task with a
think time runs again without it. CPU per request and per chunk, whole and steady window, and
start-up: which task's requests cost what, and what idle streams cost (``cost_classes.py``).

**Start-up** (``--only startup``): one user for ``--startup-seconds`` (2 s) on
``--classes-scenario``, each tree and plain Locust in turn, ``--repeat`` rounds: the CPU each
process had spent when the server received its first request, and its whole-process CPU
(``cost_startup.py``). A short run weighs start-up most; a Locust plugin's floor is Locust's own.

**Together** (``--only together``, with ``--src``): this tree and each ``--src`` at the same time on
core 0, ``--streams`` users each on ``--classes-scenario``, one truth server, ``--repeat`` rounds:
each tree's CPU per request and per chunk and its steady share of a core against this tree's in
the same seconds. The machine's drift between runs (up to 1.45x on this project's VM) hits all
trees alike, so a difference of a few per cent shows; CPU only, as the clients share a core
(``cost_together.py``).

**Ceiling** (``--only ceiling``): a worker's load at which accuracy still holds on one core, for
short and long answers (``--ceiling-lengths``, 12 and 192 tokens): closed-loop runs at more and
more streams (``--ceiling-streams``) until the TTFT, chunk-gap or e2e error p99 passes 1 ms;
the last run that held gives requests/s and chunks/s (and the share of the core it used).

**The host's wake-up charge**: every run prints ``benchmarks/hostidle.py``'s probe at its start
and end: the CPU a fixed piece of work costs right after an idle of 0.5 and 2.5 ms, against
the same work back to back, on core 0. A lightly loaded client sleeps between bursts, and on a
machine where work after an idle runs slow (seen here on 2026-12-07: 2-4x after 2.5 ms, for
minutes at a time) every client is charged for it, so each client's CPU per chunk moves with
the probe (on 2026-12-07 both clients' by ~20-25 %, the ratios not). ``--warm-core`` holds ``/dev/cpu_dma_latency``
at 0 for the whole run (as ``pyperf system tune`` does; root only): idle CPUs poll instead of
halting, the polling is charged to no client, and each client pays for its own work only. It is
a diagnostic, run beside the default, never instead of it.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from cost_ceiling import run_ceiling
from cost_classes import run_classes
from cost_compare import CASES, expand_cases, run_compare, summary_lines
from cost_idle import run_idle
from cost_split import run_split
from cost_startup import run_startup
from cost_together import run_together
from costrun import stamp
from hostidle import line as idle_line
from hostidle import probe as idle_probe
from hostidle import warm_core
from spec_workload import compile_trees


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("split", "compare", "ceiling", "idle", "classes", "startup", "together"),
                    help="one part only (default: split and compare; the ceiling, idle, classes, startup and together "
                         "run only when asked)")
    ap.add_argument("--startup-seconds", type=float, default=2.0, help="startup: each one-user run's length")
    ap.add_argument("--ceiling-lengths", type=int, nargs="+", default=[12, 192],
                    help="ceiling: answer lengths, short and long (tokens)")
    ap.add_argument("--ceiling-streams", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
                    help="ceiling: the loads tried, lowest first")
    ap.add_argument("--lengths", type=int, nargs="+", default=[12, 48, 192], help="answer lengths of the split (tokens)")
    ap.add_argument("--split-baseline", action="store_true",
                    help="split: plain Locust at every length too, in the same rounds, with the same request bodies, "
                         "and its own fit: per request and per chunk against tokenswarm's on the same machine")
    ap.add_argument("--streams", type=int, default=96)
    ap.add_argument("--one-token-streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--repeat", type=int, default=2, help="rounds (the split's lengths, the comparison's pairs)")
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--tokens-per-chunk", default="3")
    ap.add_argument("--cases", nargs="+", default=list(CASES), metavar="CASE",
                    help=f"compare: {', '.join(CASES)} (default: all three), each also as CASE:TASK (one task of "
                         "its scenario alone, e.g. mix:multi_turn) or CASE:all (every task alone, in turn)")
    ap.add_argument("--baseline-bodies", choices=("scenario", "plain"), default="scenario",
                    help="the baseline's requests: the scenario's own bodies, built by tokenswarm's workload code "
                         "(default), or the two-word prompt at tokenswarm's mean answer length (the earlier runs)")
    ap.add_argument("--src", action="append", metavar="DIR",
                    help="split, compare, idle and startup: also run the tokenswarm of this checkout (C extension built in "
                         "place), in the same rounds; together: run it at the same time as this tree")
    ap.add_argument("--classes-scenario", default="scenarios/mix.yaml",
                    help="classes: the mixed scenario whose tasks run one at a time; startup and together: the "
                         "scenario run")
    ap.add_argument("--classes-no-think", action="store_true",
                    help="classes: run each task that has a think time once more with it set to 0")
    ap.add_argument("--keep", type=Path, help="keep the runs and truth logs here")
    ap.add_argument("--warm-core", action="store_true",
                    help="hold /dev/cpu_dma_latency at 0 for the whole run (idle CPUs poll instead of halting, as "
                         "pyperf system tune sets it): no client is charged for the machine's slow wake-ups; needs root")
    args = ap.parse_args()
    try:
        args.cases = expand_cases(args.cases)
    except ValueError as exc:
        ap.error(str(exc))
    with warm_core(args.warm_core):
        return run(args)


def run(args: argparse.Namespace) -> int:
    """The parts asked for, between two readings of the host's wake-up charge (hostidle.py)."""
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"started {stamp()}")
    print(idle_line(idle_probe(), warm_core=args.warm_core))
    work = args.keep or Path(tempfile.mkdtemp(prefix="tokenswarm-reqcost-"))
    work.mkdir(parents=True, exist_ok=True)
    compile_trees(argparse.Namespace(spec_src=args.src))
    if args.only in (None, "split"):
        run_split(args, work)
    if args.only == "ceiling":
        run_ceiling(args, work)
    if args.only == "idle":
        run_idle(args, work)
    if args.only == "classes":
        run_classes(args, work)
    if args.only == "startup":
        run_startup(args, work)
    if args.only == "together":
        run_together(args, work)
    if args.only in (None, "compare"):
        results = [run_compare(args, work, case) for case in args.cases]
        if len(results) > 1:
            print("\n== the cases' ratios (whole-process and steady-window CPU per chunk, baseline / tokenswarm)")
            print("\n".join(summary_lines(results)))
    print(f"\nfinished {stamp()}")
    print(idle_line(idle_probe(), warm_core=args.warm_core))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
