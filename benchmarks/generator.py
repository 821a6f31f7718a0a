"""How many SSE events per second one client core sustains: plain Locust vs tokenswarm.

Both clients run against the simulator's ``bench-10ms`` profile (every stream gets one token
per chunk every 10 ms, whatever the batch: the server is not the bottleneck) with N
streams, each pinned to CPU core 0 while the simulator runs on core 1 (``taskset``).
Offered load = N x 100 events/s. Measured per client, in one run of this script:

* events/s the client actually consumed (the simulator's ``chunks_sent`` delta / wall time),
* the client's CPU time per event over a steady mid-run window (process-tree CPU / events;
  start-up and shutdown are not charged) and its CPU share of a core,
* the ratio tokenswarm / baseline of events/s per core.

A client that cannot keep up slows the closed-loop streams down (backpressure), so
events/s at ~100 % CPU is its ceiling.

Worker scaling (``--workers 2``): tokenswarm with one worker process, then with two (master
plus local workers, unpinned: they share the machine's cores with the simulator), against a
second simulator in the ``bench-burst`` profile -- the same 10 ms per event, but each
stream's events leave 8 per socket write, so the simulator needs a fraction of a core and
the workers, not the simulator, should set the aggregate events/s. Offered load is raised
(``--scaling-streams``, default 1536 = 153.6k events/s). The simulator's own CPU share is
printed for every row: on a 2-core machine it needs most of a core at these rates, which
caps what two workers can show (see the README).

    python benchmarks/generator.py --streams 256 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenswarm.sim.testing import SimHandle, start_sim  # noqa: E402


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


def run_client(kind: str, sim: SimHandle, streams: int, seconds: float, workdir: Path, pin: bool, workers: int = 0,
               reader: str = "hub", output_tokens: int = 200,
               warm_s: float | None = None) -> dict:
    env = {**os.environ, "BENCH_COUNT_FILE": str(workdir / f"{kind}.count"), "TOKENSWARM_READER": reader}
    taskset = ["taskset", "-c", "0"] if pin and shutil.which("taskset") else []
    if kind == "baseline":
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "baseline_locustfile.py")]
    else:
        scenario = workdir / "bench.yaml"
        scenario.write_text(json.dumps({
            "name": "bench", "target": {"metrics_url": None, "timeouts": {"first_token_s": 600, "total_s": 600}},
            "traffic": {"seed": 1, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 8},
                                                      "output_tokens": {"dist": "fixed", "value": output_tokens},
                                                      "sampling": {"ignore_eos": True}}}},
            "load": {"mode": "closed", "steps": [streams], "warmup_s": 0, "step_duration_s": seconds,
                     "stop_timeout_s": 0}}))
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--scenario", str(scenario),
               "--out", str(workdir / f"run-{kind}")]
        if workers:
            cmd += ["--processes", str(workers)]
    cmd = taskset + cmd + ["--headless", "--host", sim.base_url, "-u", str(streams), "-r", str(streams), "-t",
                           f"{int(seconds)}s", "--only-summary", "--stop-timeout", "0"]
    # CPU per event is measured over a steady window in the middle of the run (after start-up
    # and ramp, before shutdown), from the client process tree's CPU times and the simulator's
    # chunk counter at the same two moments: start-up work is not charged to the events.
    import psutil

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    warm = warm_s if warm_s is not None else min(6.0, seconds / 3)
    window = max(2.0, seconds - warm - 3.0)
    time.sleep(warm + 1.0)

    def tree_cpu() -> float:
        try:
            ps = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in ps:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

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
            "cpu_share_of_core": round(cpu / wall, 2), "sim_cpu_share": round((s1 - s0) / wall, 2)}


def print_rows(rows: list[dict]) -> None:
    print(f"{'client':<34} {'events/s':>9} {'CPU us/event':>13} {'CPU share':>10} {'events':>9} {'sim CPU':>8}")
    for r in rows:
        print(f"{r['client']:<34} {r['events_per_s']:>9.0f} {r['cpu_us_per_event'] or 0:>13.1f} "
              f"{r['cpu_share_of_core']:>10.2f} {r['events']:>9} {r['sim_cpu_share']:>8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--workers", type=int, default=2, help="also compare 1 worker with this many (0 = skip)")
    ap.add_argument("--scaling-streams", type=int, default=1536, help="streams offered in the worker comparison")
    ap.add_argument("--skip-baseline", action="store_true", help="only the worker comparison")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tokenswarm-genbench-"))
    rows: list[dict] = []
    lag: dict = {}
    if not args.skip_baseline:
        with start_sim("--profile", "bench-10ms", cpus="1") as sim:
            for kind, reader in (("baseline", "hub"), ("tokenswarm", "hub"), ("tokenswarm", "greenlet")):
                rows.append(run_client(kind, sim, args.streams, args.seconds, work, pin=True, reader=reader))
            lag = sim.stats()
        offered = args.streams * 100
        print(f"\nSSE events/s per client core, {args.streams} streams x 100 events/s offered = {offered}/s "
              f"(simulator bench-10ms on core 1; clients on core 0)")
        print_rows(rows)
        b, t = rows[0], rows[1]
        print(f"\nratio tokenswarm / baseline: events/s {t['events_per_s'] / b['events_per_s']:.2f}x, "
              f"CPU per event {b['cpu_us_per_event'] / t['cpu_us_per_event']:.2f}x cheaper")
        print(f"ceiling per core (1 s of CPU / CPU per event): baseline {1e6 / b['cpu_us_per_event']:.0f} events/s, "
              f"tokenswarm {1e6 / t['cpu_us_per_event']:.0f} events/s")
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
