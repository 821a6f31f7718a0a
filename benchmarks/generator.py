"""How many SSE events per second one client core sustains: plain Locust vs tokenswarm.

Both clients run against the simulator's ``bench-10ms`` profile (every stream gets one token
per chunk every 10 ms, whatever the batch: the server is not the bottleneck) with N
streams, each pinned to CPU core 0 while the simulator runs on core 1 (``taskset``).
Offered load = N x 100 events/s. Measured per client, in one run of this script:

* events/s the client actually consumed (the simulator's ``chunks_sent`` delta / wall time),
* the client's CPU time per event over a steady mid-run window (process-tree CPU / events;
  start-up and shutdown are not charged) and its CPU share of a core,
* the ratio tokenswarm / baseline of CPU per event, as the median of ``--repeat``
  alternating baseline/tokenswarm pairs (slow drifts of the machine hit both alike).

A client that cannot keep up slows the closed-loop streams down (backpressure), so
events/s at ~100 % CPU is its ceiling. The simulator cannot offer the ~50k events/s a
saturated tokenswarm core would read, so the per-core ceiling is also *measured* with both
clients capped at the same fraction of a core (``--cpu-quota``, a cgroup CPU quota; needs
root; default 0.3 of a core, several shares may be given): each then sustains what it can.
A capped baseline reads several events of a stream at once (cheaper per event, and its
timings are then wrong), which the uncapped pairs do not show. At a share where tokenswarm
reads everything offered without using its whole quota, the ratio only bounds the offered
load, and the script says so.

Worker scaling (``--workers 2``): tokenswarm with one worker process, then with two (master
plus local workers, unpinned: they share the machine's cores with the simulator), against a
second simulator in the ``bench-burst`` profile -- the same 10 ms per event, but each
stream's events leave 8 per socket write, so the simulator needs a fraction of a core and
the workers, not the simulator, should set the aggregate events/s. Offered load is raised
(``--scaling-streams``, default 1536 = 153.6k events/s). The simulator's own CPU share is
printed for every row: on a 2-core machine it needs most of a core at these rates, which
caps what two workers can show (see the README).

Speculative-decoding traffic (``--workload spec``): what a user's machine pays on the chunks
speculative decoding produces, against the uvicorn truth server (``benchmarks/truthserver``,
not the simulator): ``--spec-streams`` streams (96), one event every 5 ms carrying
``--spec-tokens-per-chunk`` tokens (3), 256-token answers (~85 chunks per request), the
prompts of ``scenarios/qa.yaml``. Each client is run as a whole process, A B A B, pinned to core 0
(the truth server alone on core 1), every tokenswarm tree byte-compiled first as installing it
would: its CPU from
start to exit (start-up, ramp and teardown included, from ``getrusage`` of the waited
process tree) per chunk it received and per request, next to the steady mid-run window's
CPU per chunk, and the per-core ceilings that follow (1 s of CPU / CPU per chunk, and per
request). A second case follows with the same measurement on one-token chunks at
``--spec-one-token-streams`` streams (256; 0 skips it), one event every
``--spec-one-token-step-ms`` (10 ms: at 5 ms the truth server cannot keep up with 256
streams and batches its writes), ~256 chunks per request.

    python benchmarks/generator.py --streams 256 --seconds 20
    python benchmarks/generator.py --workload spec --seconds 20 --repeat 2
    python benchmarks/generator.py --workload spec --seconds 15 --repeat 2 --spec-src /tmp/older-checkout
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenswarm.sim.testing import SimHandle, start_sim  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from spec_workload import process_tree_cpu, steady_window  # noqa: E402
from truthjoin import join, load_truth  # noqa: E402


def sim_chunks(sim: SimHandle) -> float:
    for line in sim.metrics_text(timeout_s=30).splitlines():  # a saturated simulator answers slowly
        if line.startswith("tokenswarm_sim:chunks_sent_total"):
            return float(line.split()[-1])
    raise RuntimeError("simulator exposes no tokenswarm_sim:chunks_sent_total")


def proc_cpu(pid: int) -> float:
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return 0.0


_GROUPS = itertools.count(1)


class CpuQuota:
    """A cgroup that caps its processes at ``share`` of one core (Linux, root; v1 or v2 ``cpu``).

    The short period (10 ms) keeps each throttling pause short. ``procs_file`` is None where
    no cpu controller is writable, and the benchmark says so instead of measuring.
    """

    def __init__(self, share: float) -> None:
        self.share, self.path, self.procs_file = share, None, None
        period_us = 10_000
        quota_us = max(1000, int(share * period_us))
        name = f"tokenswarm-bench-{os.getpid()}-{next(_GROUPS)}"  # one group per quota: each its own budget
        for root, v2 in ((Path("/sys/fs/cgroup/cpu"), False), (Path("/sys/fs/cgroup"), True)):
            try:
                if v2 and "cpu" not in (root / "cgroup.controllers").read_text().split():
                    continue
                path = root / name
                path.mkdir(exist_ok=True)
                if v2:
                    (path / "cpu.max").write_text(f"{quota_us} {period_us}")
                else:
                    (path / "cpu.cfs_period_us").write_text(str(period_us))
                    (path / "cpu.cfs_quota_us").write_text(str(quota_us))
                self.path, self.procs_file = path, path / "cgroup.procs"
                return
            except OSError:
                continue

    def enter(self) -> None:
        """Move the calling process into the group (a subprocess's preexec_fn)."""
        assert self.procs_file is not None
        self.procs_file.write_text(str(os.getpid()))

    def remove(self) -> None:
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass


_RUNS = itertools.count(1)


def run_client(kind: str, sim: SimHandle, streams: int, seconds: float, workdir: Path, pin: bool, workers: int = 0,
               reader: str = "hub", output_tokens: int = 200,
               warm_s: float | None = None, quota: CpuQuota | None = None) -> dict:
    run = workdir / f"run-{next(_RUNS)}-{kind}"  # tokenswarm's --out, or the baseline's per-event times
    env = {**os.environ, "BENCH_COUNT_FILE": str(workdir / f"{kind}.count"), "TOKENSWARM_READER": reader,
           "BENCH_TIMES_FILE": str(run.with_suffix(".times.jsonl"))}
    taskset = ["taskset", "-c", "0"] if pin and shutil.which("taskset") else []
    if kind == "baseline":
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "baseline_locustfile.py")]
    else:
        scenario = workdir / "bench.yaml"
        scenario.write_text(json.dumps({
            "name": "bench", "target": {"metrics_url": None, "timeouts": {"first_token_s": 600, "total_s": 600}},
            "traffic": {"seed": 1, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 8},
                                                      "max_tokens": {"dist": "fixed", "value": output_tokens},
                                                      "sampling": {"ignore_eos": True}}}},
            "load": {"mode": "closed", "steps": [streams], "warmup_s": 0, "step_duration_s": seconds,
                     "stop_timeout_s": 0}}))
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--scenario", str(scenario),
               "--out", str(run)]
        if workers:
            cmd += ["--processes", str(workers)]
    cmd = taskset + cmd + ["--headless", "--host", sim.base_url, "-u", str(streams), "-r", str(streams), "-t",
                           f"{int(seconds)}s", "--only-summary", "--stop-timeout", "0"]
    # CPU per event is measured over a steady window in the middle of the run (after start-up
    # and ramp, before shutdown), from the client process tree's CPU times and the simulator's
    # chunk counter at the same two moments: start-up work is not charged to the events.

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=quota.enter if quota is not None else None)
    wait, window = steady_window(seconds, warm_s)
    time.sleep(wait)

    def tree_cpu() -> float:
        return process_tree_cpu(proc.pid)

    s0 = proc_cpu(sim.proc.pid)
    c0, k0, t0 = tree_cpu(), sim_chunks(sim), time.perf_counter()
    time.sleep(window)
    c1, k1, t1 = tree_cpu(), sim_chunks(sim), time.perf_counter()
    s1 = proc_cpu(sim.proc.pid)
    _out, err = proc.communicate(timeout=seconds + 120)
    if proc.returncode not in (0, 1):
        print(err[-3000:], file=sys.stderr)
        raise SystemExit(f"{kind} client failed ({proc.returncode})")
    chunks, cpu, wall = k1 - k0, c1 - c0, t1 - t0
    label = kind if kind == "baseline" else f"{kind} ({reader} reader)"
    return {"client": label if not workers else f"{label} x{workers} workers", "streams": streams,
            "events": int(chunks), "wall_s": round(wall, 2), "events_per_s": round(chunks / wall, 0),
            "cpu_s": round(cpu, 2), "cpu_us_per_event": round(cpu / chunks * 1e6, 1) if chunks else None,
            "cpu_share_of_core": round(cpu / wall, 2), "sim_cpu_share": round((s1 - s0) / wall, 2), "run": run,
            "window_s": (t0, t1)}


def client_requests(row: dict) -> list[tuple]:
    """(response id, TTFT ms, chunk offsets ms) of each complete request a client run saw."""
    run: Path = row["run"]
    times = run.with_suffix(".times.jsonl")
    if times.exists():  # the baseline's own log
        return [(r["id"], r["ttft_ms"], r["offsets_ms"]) for r in map(json.loads, times.read_text().splitlines())]
    records = run / "records.jsonl"
    if not records.exists():
        return []
    return [(r["response_id"], r["ttft_ms"], r["chunk_offsets_ms"])
            for r in map(json.loads, records.read_text().splitlines()) if r["outcome"] == "ok"]


def add_errors(rows: list[dict], truth_path: str) -> None:
    """Join each run's requests to the simulator's truth and add the errors.

    Only complete requests the simulator received inside the run's measurement window count
    (the window the CPU is measured over), so connection set-up and the first burst of
    requests at start-up are left out for both clients, as the accuracy benchmark leaves
    out its warm-up. ``received`` is on CLOCK_MONOTONIC, as is this process's perf_counter.
    """
    truth = [t for t in load_truth(truth_path).values() if t["outcome"] == "ok"]
    for row in rows:
        start, end = row["window_s"]
        window = {t["id"]: t for t in truth if start <= t["received"] <= end}
        reqs = [r for r in client_requests(row) if r[0] in window]
        row.update(join(reqs, window))


def print_rows(rows: list[dict]) -> None:
    errs = any("ttft_err_p99_ms" in r for r in rows)
    print(f"{'client':<34} {'events/s':>9} {'CPU us/event':>13} {'CPU share':>10} {'events':>9} {'sim CPU':>8}"
          + (f" {'TTFT err p50/p99 ms':>20} {'gap err p50/p99 ms':>19}" if errs else ""))
    for r in rows:
        line = (f"{r['client']:<34} {r['events_per_s']:>9.0f} {r['cpu_us_per_event'] or 0:>13.1f} "
                f"{r['cpu_share_of_core']:>10.2f} {r['events']:>9} {r['sim_cpu_share']:>8.2f}")
        if errs and "ttft_err_p99_ms" in r:
            line += (f" {r['ttft_err_p50_ms']:>10.2f}/{r['ttft_err_p99_ms']:<9.2f}"
                     f" {r['gap_err_p50_ms']:>9.2f}/{r['gap_err_p99_ms']:<9.2f}")
        print(line)
    if errs:
        print("errors: |client - server| against the simulator's ground truth, complete requests joined by "
              "response id (goal at this load: p99 <= 2 ms)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--workers", type=int, default=2, help="also compare 1 worker with this many (0 = skip)")
    ap.add_argument("--scaling-streams", type=int, default=1536, help="streams offered in the worker comparison")
    ap.add_argument("--skip-baseline", action="store_true", help="only the worker comparison")
    ap.add_argument("--repeat", type=int, default=3, help="alternating baseline/tokenswarm pairs (median reported)")
    ap.add_argument("--cpu-quota", type=float, nargs="+", default=[0.3], metavar="SHARE",
                    help="shares of a core both clients get in the capped comparisons (0 = skip; needs root)")
    ap.add_argument("--workload", choices=("bench", "spec"), default="bench",
                    help="bench: one-token events from the simulator (above); spec: speculative chunks from the "
                         "uvicorn truth server, whole-process CPU")
    ap.add_argument("--spec-streams", type=int, default=96)
    ap.add_argument("--spec-tokens-per-chunk", default="3", help="truth server --tokens-per-chunk (N or LO-HI)")
    ap.add_argument("--spec-step-ms", type=float, default=5.0)
    ap.add_argument("--spec-output-tokens", type=int, default=256)
    ap.add_argument("--spec-one-token-streams", type=int, default=256,
                    help="second spec case: this many streams of one-token chunks (0 = skip)")
    ap.add_argument("--spec-src", action="append", metavar="DIR",
                    help="spec workload: also run the tokenswarm of this checkout (C extensions built in place) "
                         "in every round, between the baseline and this one: before/after side by side")
    ap.add_argument("--spec-one-token-step-ms", type=float, default=10.0,
                    help="the one-token case's step: at 5 ms x 256 streams the truth server falls behind and "
                         "batches its writes, which the clients then read several events at a time")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tokenswarm-genbench-"))
    if args.workload == "spec":
        from spec_workload import run_spec_workload

        run_spec_workload(args, work)
        shutil.rmtree(work, ignore_errors=True)
        return 0
    rows: list[dict] = []
    lag: dict = {}
    if not args.skip_baseline:
        pairs = []
        with start_sim("--profile", "bench-10ms", cpus="1", truth=True) as sim:
            # baseline and tokenswarm alternate, so slow drifts of the machine hit both alike
            for _ in range(args.repeat):
                b = run_client("baseline", sim, args.streams, args.seconds, work, pin=True)
                t = run_client("tokenswarm", sim, args.streams, args.seconds, work, pin=True, reader="hub")
                rows += [b, t]
                pairs.append((b, t))
            rows.append(run_client("tokenswarm", sim, args.streams, args.seconds, work, pin=True, reader="greenlet"))
            # Events/s per core measured, not extrapolated: the simulator cannot offer the ~50k
            # events/s a saturated tokenswarm core would read, so both clients get the same
            # fraction of a core (a cgroup CPU quota) and each sustains what it can in it.
            capped: dict[float, list[tuple[dict, dict]]] = {}
            for share in (q for q in args.cpu_quota if q > 0):
                quota = CpuQuota(share)
                if quota.procs_file is None:
                    print("note: no writable cgroup cpu controller (needs root): capped comparison skipped")
                    break
                capped[share] = [tuple(run_client(kind, sim, args.streams, args.seconds, work, pin=True, quota=quota)
                                       for kind in ("baseline", "tokenswarm")) for _ in range(args.repeat)]
                quota.remove()
            lag = sim.stats()
            sim.flush_truth()
            add_errors(rows + [r for runs in capped.values() for pair in runs for r in pair], sim.truth_path)
        offered = args.streams * 100
        print(f"\nSSE events/s per client core, {args.streams} streams x 100 events/s offered = {offered}/s "
              f"(simulator bench-10ms on core 1; clients on core 0)")
        print_rows(rows)
        ratios = sorted(b["cpu_us_per_event"] / t["cpu_us_per_event"] for b, t in pairs)
        b_us = statistics.median(b["cpu_us_per_event"] for b, _ in pairs)
        t_us = statistics.median(t["cpu_us_per_event"] for _, t in pairs)
        print(f"\nCPU per event, tokenswarm vs baseline: {statistics.median(ratios):.2f}x cheaper (median of "
              f"{len(pairs)} alternating pairs; each pair: {', '.join(f'{r:.2f}x' for r in ratios)})")
        print(f"events/s, tokenswarm / baseline: "
              f"{statistics.median(t['events_per_s'] / b['events_per_s'] for b, t in pairs):.2f}x "
              f"(both near the offered load: the baseline at ~100 % of its core)")
        print(f"ceiling per core (1 s of CPU / median CPU per event): baseline {1e6 / b_us:.0f} events/s, "
              f"tokenswarm {1e6 / t_us:.0f} events/s")
        for share, runs in capped.items():
            print(f"\nboth clients capped at {share:.2f} of a core (cgroup CPU quota), same offered load:")
            print_rows([r for pair in runs for r in pair])
            per_core = sorted(t["events_per_s"] / b["events_per_s"] for b, t in runs)
            b_eps = statistics.median(b["events_per_s"] for b, _ in runs) / share
            t_eps = statistics.median(t["events_per_s"] for _, t in runs) / share
            print(f"sustained events/s per core, tokenswarm / baseline: {statistics.median(per_core):.2f}x "
                  f"(median of {len(runs)} pairs: {', '.join(f'{r:.2f}x' for r in per_core)}); "
                  f"per core: baseline {b_eps:.0f}, tokenswarm {t_eps:.0f} events/s")
            idle = [t for _, t in runs if t["cpu_share_of_core"] < 0.9 * share]
            if idle:
                print(f"note: tokenswarm left part of its {share:.2f} share unused in {len(idle)} of {len(runs)} runs: "
                      f"it read all the simulator offered, so this ratio is bounded by the offered load, not "
                      f"by its CPU (use a smaller share)")
        if lag:
            print(f"simulator emission lag over these runs: {json.dumps(lag)[:300]}")
    if args.workers:
        # Distributed mode on this machine: a master plus N local worker processes (unpinned),
        # against the same with one worker, both against a simulator that writes 32 events at a time.
        with start_sim("--profile", "bench-burst") as sim:
            # thousands of users take a few seconds to spawn: measure after they all stream
            scaling = [run_client("tokenswarm", sim, args.scaling_streams, args.seconds + 10, work, pin=False,
                                  workers=n, output_tokens=1000, warm_s=10.0)
                       for n in (1, args.workers)]
        print(f"\nworker scaling: {args.scaling_streams} streams x 100 events/s offered = "
              f"{args.scaling_streams * 100}/s, simulator bench-burst (32 one-token events per write), all processes unpinned")
        print_rows(scaling)
        one, many = scaling
        if one["events_per_s"] and many["events_per_s"]:
            print(f"aggregate events/s, {args.workers} workers / 1 worker: "
                  f"{many['events_per_s'] / one['events_per_s']:.2f}x ({many['events_per_s']:.0f} vs "
                  f"{one['events_per_s']:.0f}); offered {args.scaling_streams * 100}/s")
            print(f"CPU per event: 1 worker {one['cpu_us_per_event']} us, {args.workers} workers "
                  f"{many['cpu_us_per_event']} us (process tree, master included); simulator "
                  f"{one['sim_cpu_share']:.2f} / {many['sim_cpu_share']:.2f} cores")
            if one["events_per_s"] >= 0.95 * args.scaling_streams * 100:
                print("note: one worker already sustains the offered load -- the ratio shows the simulator's "
                      "ceiling on this machine, not the workers'")
        else:
            print("a scaling run measured no events (start-up longer than the warm-up?)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
