"""Worker scaling by CPU budget: N workers, each capped at the same share of a core.

Two cores cannot show "twice the cores, twice the events" when the server needs one of them,
so the benchmark gives every worker process the same CPU *budget* instead: its own cgroup
CPU quota of ``--share`` of one core (10 ms period, so throttling pauses stay short), set
once load is flowing (capping a process from its start makes its imports take minutes).
The simulator runs alone on core 1, the master and the workers on core 0; every worker
gets the same users (``--users-per-worker``), so its per-event cost does not change with N.
More load is offered than the capped workers can read, so each sustains what its budget
allows and the aggregate events/s should grow with N.

Printed, per N, over a steady window in the middle of the run:

* events/s consumed (the simulator's chunk counter), and the ratio to N = 1;
* CPU per event and CPU share of each worker (the share shows the cap held);
* the master's own CPU share and its CPU per record received (records.jsonl lines written
  in the window), from which the master sizing rule follows;
* the simulator's emission-lag p99 in the window: a late server voids the row, because
  then the server, not the workers, set the rate;
* every record collected: records lost, missing sequence numbers, final messages.

Goal: 2 workers >= 1.8x and 3 workers >= 2.6x the events/s of 1 worker, CPU per event flat.

    sudo python benchmarks/scaling.py --share 0.08 --workers 1 2 3 --seconds 20

Needs root for the cgroup (v1 ``cpu`` controller or v2 ``cpu.max``); without it the script
says so and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from generator import CpuQuota, proc_cpu, sim_chunks  # noqa: E402

from tokenswarm.sim.testing import SimHandle, start_sim  # noqa: E402
from tokenswarm.wire.ports import free_port  # noqa: E402

#: Emission-lag p99 above which the simulator, not the workers, set the pace (row void).
SERVER_LATE_P99_S = 0.005
GOALS = {2: 1.8, 3: 2.6}


def profile_file(work: Path, step_ms: float) -> Path:
    """bench-10ms with another step: one token per event every ``step_ms`` per stream."""
    text = (ROOT / "tokenswarm" / "sim" / "profiles" / "bench-10ms.yaml").read_text()
    text = text.replace("name: bench-10ms", "name: bench-scaling").replace(
        "weights_read_s: 0.010", f"weights_read_s: {step_ms / 1000:.4f}")
    path = work / "bench-scaling.yaml"
    path.write_text(text)
    return path


def lag_buckets(sim: SimHandle) -> dict[float, float]:
    """Cumulative emission-lag histogram buckets (le -> count), summed over label sets."""
    out: dict[float, float] = {}
    for line in sim.metrics_text(timeout_s=30).splitlines():
        if line.startswith("tokenswarm_sim:emission_lag_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            key = float("inf") if le == "+Inf" else float(le)
            out[key] = out.get(key, 0.0) + float(line.split()[-1])
    return out


def lag_p99_s(before: dict[float, float], after: dict[float, float]) -> float | None:
    """p99 of the window's emission lags, as the upper bound of the bucket that holds it."""
    delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = delta[-1][1] if delta else 0.0
    if total <= 0:
        return None
    for le, count in delta:
        if count >= 0.99 * total:
            return le
    return None


def scenario(work: Path, users: int, seconds: float, output_tokens: int) -> Path:
    path = work / f"scaling-{users}.yaml"
    path.write_text(json.dumps({
        "name": "scaling", "target": {"metrics_url": None, "timeouts": {"first_token_s": 600, "total_s": 600}},
        "traffic": {"seed": 1, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 8},
                                                  "max_tokens": {"dist": "fixed", "value": output_tokens},
                                                  "sampling": {"ignore_eos": True}}}},
        "load": {"mode": "closed", "steps": [users], "warmup_s": 0, "step_duration_s": seconds, "stop_timeout_s": 5}}))
    return path


def run_n(n: int, sim: SimHandle, args: argparse.Namespace, work: Path) -> dict:
    users = n * args.users_per_worker
    total_s = args.warm + args.seconds + 2
    out = work / f"run-{n}"
    port = free_port()
    taskset = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    locust = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py")]
    master = subprocess.Popen(
        taskset + locust + ["--master", "--headless", "--expect-workers", str(n), "--expect-workers-max-wait", "120",
                            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                            "--scenario", str(scenario(work, users, total_s, args.output_tokens)),
                            "--host", sim.base_url, "--out", str(out), "-u", str(users), "-r", str(users),
                            "-t", f"{int(total_s)}s", "--only-summary"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    workers = [subprocess.Popen(
        taskset + locust + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(n)]
    quotas = [CpuQuota(args.share) for _ in workers]
    try:
        if any(q.procs_file is None for q in quotas):
            raise SystemExit(3)
        records = out / "records.jsonl"
        deadline = time.monotonic() + 120
        while not records.exists() and time.monotonic() < deadline:  # load is flowing once records arrive
            time.sleep(0.2)
        for q, w in zip(quotas, workers):  # capped only now: imports and connects ran at full speed
            q.procs_file.write_text(str(w.pid))
        time.sleep(args.warm)

        def snapshot() -> tuple:
            lines = records.read_bytes().count(b"\n") if records.exists() else 0
            return (time.perf_counter(), sim_chunks(sim), [proc_cpu(w.pid) for w in workers], proc_cpu(master.pid),
                    proc_cpu(sim.proc.pid), lines, lag_buckets(sim))

        a = snapshot()
        time.sleep(args.seconds)
        b = snapshot()
        for q, w in zip(quotas, workers):  # uncapped again: stopping 120 users at 0.08 of a core takes long
            q.path.parent.joinpath("cgroup.procs").write_text(str(w.pid))
        log, _ = master.communicate(timeout=total_s + 180)
        master_end = time.monotonic()
        lingered_s = 0.0
        for w in workers:  # workers should follow their master within seconds; the row says how long
            try:
                w.wait(timeout=max(0.1, 60 - (time.monotonic() - master_end)))
            except subprocess.TimeoutExpired:
                pass
            lingered_s = time.monotonic() - master_end
        left = sum(w.poll() is None for w in workers)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for q in quotas:
            q.remove()
    wall = b[0] - a[0]
    events = b[1] - a[1]
    worker_cpu = [y - x for x, y in zip(a[2], b[2])]
    master_cpu, sim_cpu, recs = b[3] - a[3], b[4] - a[4], b[5] - a[5]
    manifest = json.loads((out / "manifest.json").read_text())
    totals = manifest["totals"]
    missing = sum(len(w["missing_seqs"]) for w in manifest["workers"])
    finals = sum(bool(w["final_received"]) for w in manifest["workers"])
    lag = lag_p99_s(a[6], b[6])
    return {
        "workers": n, "users": users, "events_per_s": events / wall,
        "worker_cpu_us_per_event": sum(worker_cpu) / events * 1e6 if events else None,
        "worker_cpu_share": [round(c / wall, 3) for c in worker_cpu],
        "master_cpu_share": master_cpu / wall, "master_cpu_us_per_record": master_cpu / recs * 1e6 if recs else None,
        "records_per_s": recs / wall, "sim_cpu_share": sim_cpu / wall, "sim_lag_p99_s": lag,
        "records_received": totals["records_received"], "records_lost": totals["records_lost"],
        "missing_seq_ranges": missing, "finals": finals, "exit_status": master.returncode,
        "void": lag is not None and lag > SERVER_LATE_P99_S, "log_tail": log[-1500:],
        "workers_lingered_s": lingered_s, "workers_left": left,
    }


def master_cost(rows: list[dict]) -> tuple[float, float | None]:
    """(fixed CPU share, CPU us per record/s) of the master, fitted over the rows.

    The master's CPU has a fixed part (heartbeats, live statistics, scrapes) and a part per
    record received; one row's CPU per record mixes the two, so a line is fitted instead.
    """
    xs = [r["records_per_s"] for r in rows]
    ys = [r["master_cpu_share"] for r in rows]
    if len(rows) < 2 or max(xs) - min(xs) < 0.2 * max(xs):
        return (ys[0] if ys else 0.0), None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return max(0.0, my - slope * mx), max(slope, 0.0) * 1e6 or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--share", type=float, default=0.08, help="CPU quota of each worker, in cores (default 0.08)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3], help="worker counts to measure (1 first)")
    ap.add_argument("--users-per-worker", type=int, default=120)
    ap.add_argument("--step-ms", type=float, default=20.0, help="simulator step: one event per stream per step")
    ap.add_argument("--output-tokens", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0, help="measurement window")
    ap.add_argument("--warm", type=float, default=4.0, help="seconds after capping before the window")
    args = ap.parse_args()
    if args.workers[0] != 1:
        ap.error("--workers must start with 1 (the ratios are to one worker)")
    if CpuQuota(args.share).procs_file is None:
        print("no writable cgroup cpu controller (needs root): nothing measured", file=sys.stderr)
        return 3
    work = Path(tempfile.mkdtemp(prefix="tokenswarm-scaling-"))
    offered = args.users_per_worker * 1000 / args.step_ms
    print(f"each worker: {args.users_per_worker} users, offered {offered:.0f} events/s, capped at "
          f"{args.share:.2f} of a core; simulator alone on core 1, master + workers on core 0; "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    rows = []
    with start_sim("--profile", str(profile_file(work, args.step_ms)), cpus="1") as sim:
        for n in args.workers:
            rows.append(run_n(n, sim, args, work))
    base = rows[0]["events_per_s"]
    print(f"{'workers':>7} {'events/s':>9} {'x1':>6} {'us/event':>9} {'worker CPU shares':>22} {'master CPU':>10} "
          f"{'master us/rec':>13} {'rec/s':>7} {'sim lag p99':>11} {'lost':>5} {'finals':>6}")
    ok = True
    for r in rows:
        ratio = r["events_per_s"] / base
        lag = f"{r['sim_lag_p99_s'] * 1000:.1f} ms" if r["sim_lag_p99_s"] is not None else "n/a"
        print(f"{r['workers']:>7} {r['events_per_s']:>9.0f} {ratio:>6.2f} {r['worker_cpu_us_per_event'] or 0:>9.1f} "
              f"{' '.join(f'{s:.3f}' for s in r['worker_cpu_share']):>22} {r['master_cpu_share']:>10.3f} "
              f"{r['master_cpu_us_per_record'] or 0:>13.0f} {r['records_per_s']:>7.0f} {lag:>11} "
              f"{r['records_lost']:>5} {r['finals']:>3}/{r['workers']}")
        goal = GOALS.get(r["workers"])
        complete = r["records_lost"] == 0 and r["missing_seq_ranges"] == 0 and r["finals"] == r["workers"]
        if not complete:
            ok = False
            print(f"  {r['workers']} workers: records NOT complete (exit {r['exit_status']}):\n{r['log_tail']}")
        if r["workers_left"] or r["workers_lingered_s"] > 10:
            ok = False
            print(f"  {r['workers']} workers: {r['workers_left']} worker(s) still running "
                  f"{r['workers_lingered_s']:.0f} s after the master ended (killed)")
        if r["void"]:
            ok = False
            print(f"  {r['workers']} workers: VOID, the simulator was late (emission lag p99 {lag} > "
                  f"{SERVER_LATE_P99_S * 1000:.0f} ms): it set the pace, not the workers")
        elif goal is not None:
            met = ratio >= goal
            ok &= met
            print(f"  {r['workers']} workers: {ratio:.2f}x one worker (goal >= {goal}x): {'met' if met else 'MISSED'}")
    fixed, per_record = master_cost(rows)
    if per_record is not None:
        print(f"master sizing: master CPU = {fixed:.3f} of a core + {per_record:.0f} us per record received/s "
              f"(least squares over the rows) -> one master core takes ~{(1 - fixed) * 1e6 / per_record:.0f} "
              f"records/s; N workers each sending R records/s need {fixed:.3f} + N*R*{per_record:.0f}e-6 of a core")
    else:
        print("master sizing: the rows' record rates are too close to separate the master's fixed and per-record cost")
    print("verdict:", "scaling goals met, every record collected" if ok else "goals NOT met (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
