"""The runner the generator-cost benchmarks share (``request_cost.py`` and its parts): the
commands of both clients, one client's run from start to exit on core 0 with its whole-process
and steady-window CPU, what the truth server sent it, and its timing errors against that truth.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from spec_workload import _children_cpu, process_tree_cpu, steady_window  # noqa: E402
from truthjoin import join  # noqa: E402

#: every timing error's goal: TTFT, chunk gap and e2e error p99 against the truth
ACCURACY_GOAL_MS = 1.0
#: While a client starts, its CPU-time clock is read this often (seconds) ...
STARTUP_SAMPLE_S = 0.005
#: ... for this long after it is started (none here takes half of it to send its first request);
#: its start-up is the clock's value, interpolated, when the server received that request.
STARTUP_WINDOW_S = 8.0


def stamp() -> str:
    """Date, load average and core count: a shared machine's figures need them."""
    la = os.getloadavg()
    return (f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average {la[0]:.2f} {la[1]:.2f} "
            f"{la[2]:.2f}, {os.cpu_count()} cores")


def tokenswarm_command(host: str, scenario: str, streams: int, seconds: float, run: Path,
                       sets: list[str], src: Path = ROOT) -> list[str]:
    """One tokenswarm process (the tree at ``src``) on ``scenario``, its load plan replaced by
    ``streams`` users for ``seconds``."""
    cmd = [sys.executable, "-m", "locust", "-f", str(src / "locustfiles" / "llm.py"), "--scenario",
           str(src / scenario), "--out", str(run), "--headless", "--host", host, "-u", str(streams), "-r",
           str(streams), "-t", f"{int(seconds)}s", "--only-summary", "--stop-timeout", "5",
           "--set", f"load.steps=[{streams}]", "--set", "load.warmup_s=0", "--set",
           f"load.step_duration_s={seconds:g}", "--set", "load.spawn_rate=100000", "--set", "target.metrics_url=null",
           "--set", "slo={}"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def alone(task_names: list[str], task: str) -> list[str]:
    """The ``--set`` overrides that leave ``task`` alone among ``task_names``: every other
    task's weight 0 (its prompts, lengths and think times untouched)."""
    return [f"traffic.classes.{o}.weight=0" for o in task_names if o != task]


def length_field(src: Path) -> str:
    """The scenario field of the requested answer length in the tree at ``src``: ``max_tokens``
    (format 3 on), ``output_tokens`` in older trees (compared with ``--src``)."""
    return "max_tokens" if "max_tokens:" in (src / "scenarios" / "qa.yaml").read_text() else "output_tokens"


def baseline_command(host: str, streams: int, seconds: float) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "baseline_locustfile.py"), "--headless",
            "--host", host, "-u", str(streams), "-r", str(streams), "-t", f"{int(seconds)}s", "--only-summary",
            "--stop-timeout", "5"]


def trees_of(args: argparse.Namespace, this: str = "this") -> list[tuple[str, Path]]:
    """This tree (labelled ``this``) and each ``--src`` checkout, as (label, root)."""
    return [(this, ROOT), *((Path(d).resolve().name, Path(d).resolve()) for d in args.src or [])]


def in_turn(trees: list[tuple[str, Path]], n: int) -> list[tuple[str, Path]]:
    """The trees in round ``n``'s order: turned by one each round, so that a place in the round
    that favours its runner favours no tree."""
    turn = n % len(trees)
    return trees[turn:] + trees[:turn]


def baseline_bodies_env(args: argparse.Namespace, path: Path, scenario: str, base_url: str, users: int,
                        per_user: int, sets: list[str] | None = None) -> dict[str, str]:
    """The baseline's environment for its request bodies: with ``--baseline-bodies scenario`` (the
    default) ``users x per_user`` bodies of ``scenario`` (with the ``sets`` overrides tokenswarm
    runs it with) built by tokenswarm's own workload code into ``path`` (``bench_bodies.py``);
    with ``plain``, none (its two-word prompt)."""
    if args.baseline_bodies != "scenario":
        return {}
    from bench_bodies import build_bodies, write_bodies

    bodies = build_bodies(ROOT / scenario, base_url, users, per_user, sets)
    write_bodies(path, bodies)
    print(f"baseline bodies: {len(bodies)} built from {scenario} ({path})")
    return {"BENCH_BODIES_FILE": str(path)}


def start_client(cmd: list[str], env: dict[str, str], src: Path, **popen: Any) -> subprocess.Popen[Any]:
    """One client process of the tree at ``src`` on core 0 (its own sources first on the path)."""
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    if src != ROOT:
        env = {**env, "PYTHONPATH": str(src)}
    return subprocess.Popen(cmd, cwd=src, env={**os.environ, **env}, **popen)


def process_cpu_clock_s(pid: int) -> float | None:
    """CPU seconds (user + system, every thread, ended ones too) of process ``pid`` from its
    CPU-time clock: nanoseconds, where ``/proc``'s figures come in 10 ms ticks. None once the
    process is gone, or where there is no such clock (not Linux)."""
    try:
        # the process's CPUCLOCK_SCHED clock: what clock_getcpuclockid(pid) returns on Linux
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, AttributeError):
        return None


def cpu_at(samples: list[tuple[float, float]], when: float) -> float | None:
    """A process's CPU seconds at monotonic time ``when``, interpolated between the two samples
    ``(time, cpu)`` around it; None unless the samples reach past it."""
    before = None
    for at, cpu in samples:
        if at >= when:
            if before is None:
                return cpu if at == when else None
            t0, c0 = before
            return c0 + (cpu - c0) * (when - t0) / (at - t0) if at > t0 else cpu
        before = (at, cpu)
    return None


def _children_system_cpu() -> float:
    """System (kernel) CPU seconds of the waited children so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def run_process(label: str, cmd: list[str], env: dict[str, str], seconds: float, src: Path = ROOT) -> dict[str, Any]:
    """One client from start to exit on core 0: whole-process CPU (and the kernel's part of it)
    and a steady mid-run window's."""
    before, before_sys = _children_cpu(), _children_system_cpu()
    start = time.monotonic()
    proc = start_client(cmd, env, src, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # What the process had spent when the server received its first request is its start-up,
    # measured rather than fitted (a fit cannot tell it from per-request work): its CPU-time
    # clock every STARTUP_SAMPLE_S while it starts, then the tree's ticks every 0.1 s.
    samples: list[tuple[float, float]] = []
    startup_samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        fine_until = time.monotonic() + STARTUP_WINDOW_S
        while not done.is_set():
            now = time.monotonic()
            cpu = process_cpu_clock_s(proc.pid) if now < fine_until else None
            if cpu is not None:
                startup_samples.append((now, cpu))
                done.wait(STARTUP_SAMPLE_S)
                continue
            samples.append((now, process_tree_cpu(proc.pid)))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wait, window = steady_window(seconds)
    time.sleep(wait)
    c0, t0 = process_tree_cpu(proc.pid), time.monotonic()
    time.sleep(window)
    c1, t1 = process_tree_cpu(proc.pid), time.monotonic()
    _out, err = proc.communicate(timeout=seconds + 180)
    end = time.monotonic()
    done.set()
    sampler.join()
    if proc.returncode not in (0, 1):  # 1: Locust counted a failed request; the rows show the counts
        raise SystemExit(f"{label} failed ({proc.returncode}): {err[-2000:]}")
    return {"label": label, "start": start, "end": end, "window": (t0, t1), "whole_cpu_s": _children_cpu() - before,
            "whole_system_cpu_s": _children_system_cpu() - before_sys,
            "window_cpu_s": c1 - c0, "cpu_samples": samples, "startup_samples": startup_samples}


def count(row: dict[str, Any], truth: dict[str, dict]) -> None:
    """Requests, chunks and tokens the server sent this client: whole run and steady window."""
    t0, t1 = row["window"]
    mine = [t for t in truth.values() if row["start"] <= t["received"] <= row["end"]]
    row["requests"] = len(mine)
    row["chunks"] = sum(len(t["chunks"]) for t in mine)
    row["tokens"] = sum(int(c[1]) for t in mine for c in t["chunks"])
    row["window_requests"] = sum(1 for t in mine if t["chunks"] and t0 <= t["chunks"][-1][0] <= t1)
    row["window_chunks"] = sum(1 for t in mine for c in t["chunks"] if t0 <= c[0] <= t1)
    row["window_s"] = t1 - t0
    first = min((t["received"] for t in mine), default=row["end"])
    precise = cpu_at(row.get("startup_samples", []), first)
    row["startup_cpu_s"] = precise if precise is not None else max(
        (c for when, c in row.get("cpu_samples", []) if when <= first), default=0.0)  # ticks, 0.1 s apart
    row["us_per_chunk"] = row["whole_cpu_s"] / row["chunks"] * 1e6 if row["chunks"] else None
    row["system_us_per_chunk"] = row["whole_system_cpu_s"] / row["chunks"] * 1e6 if row["chunks"] else None
    row["window_us_per_chunk"] = row["window_cpu_s"] / row["window_chunks"] * 1e6 if row["window_chunks"] else None


def accuracy(row: dict[str, Any], truth: dict[str, dict]) -> None:
    """tokenswarm's TTFT, chunk-gap and e2e errors against the truth, requests received in the steady window."""
    t0, t1 = row["window"]
    window = {t["id"]: t for t in truth.values() if t.get("outcome") == "ok" and t0 <= t["received"] <= t1}
    path = row["run"] / "records.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines() if x] if path.exists() else []
    row["accuracy"] = join([(r["response_id"], r["ttft_ms"], r["chunk_offsets_ms"], r.get("e2e_ms"))
                            for r in records if r["outcome"] == "ok" and r["response_id"] in window], window)
    row["failed"] = sum(1 for r in records if r["outcome"] != "ok")


def window_figures(r: dict[str, Any], rate_width: int) -> str:
    """A row's measured window: requests/s (``rate_width`` wide), chunks/s, CPU share, and the
    timing errors' p99 (TTFT, gap, end to end) -- the columns both tables print."""
    a = r.get("accuracy")  # none for plain Locust: it writes no records to join
    errs = (f"{a['ttft_err_p99_ms']:>12.2f} {a['gap_err_p99_ms']:>8.2f} {a['e2e_err_p99_ms']:>8.2f}" if a
            else f"{'-':>12} {'-':>8} {'-':>8}")
    return (f"{r['window_requests'] / r['window_s']:>{rate_width}.0f} {r['window_chunks'] / r['window_s']:>9.0f} "
            f"{r['window_cpu_s'] / r['window_s']:>9.2f} {errs}")
