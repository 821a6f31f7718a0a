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

**Against plain Locust** (``--compare``): ``benchmarks/baseline_locustfile.py`` (FastHttpUser,
``readline`` and ``json.loads`` per event) and tokenswarm on the shipped scenarios *as shipped*
(their prompts, length distributions, task mix, records and live statistics on; only the load
plan becomes ``--streams`` users for ``--seconds``), A B A B:

* ``qa``: ``scenarios/qa.yaml``, 3-token chunks every 5 ms;
* ``mix``: ``scenarios/mix.yaml``, 3-token chunks every 5 ms;
* ``one-token``: ``scenarios/qa.yaml`` at ``--one-token-streams`` (256), one-token chunks every 10 ms.

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

With ``--src DIR`` (a checkout with its C extension built in place) the comparison runs that
tree's tokenswarm too, in every round, between this tree's and the baseline (A B C A B C), and
prints each tree's ratio: a change's effect on the ratio, measured in one run.

Every table is printed with the date, the load average before and after, and the command.
On a shared machine absolute figures are noisy; ratios from one run are what to quote.

    python benchmarks/request_cost.py                                  # split and comparison
    python benchmarks/request_cost.py --only split --seconds 15 --repeat 2
    python benchmarks/request_cost.py --only compare --cases qa one-token --seconds 20
    python benchmarks/request_cost.py --only compare --cases qa mix --src /tmp/before
    python benchmarks/request_cost.py --only ceiling --seconds 15
    python benchmarks/request_cost.py --only idle --seconds 10 --repeat 2 --src /tmp/before

**Idle** (``--only idle``): the per-second cost of a worker whose ``--streams`` requests all wait
for a first token (the truth server holds them for a minute): its CPU share over ``--seconds``,
8 s in, per tree, alternately. What a worker spends while its server is slow is paid on every
run; a quiet worker should cost next to nothing.

**Ceiling** (``--only ceiling``): a worker's load at which accuracy still holds on one core, for
short and long answers (``--ceiling-lengths``, 12 and 192 tokens): closed-loop runs at more and
more streams (``--ceiling-streams``) until the TTFT, chunk-gap or e2e error p99 passes 1 ms;
the last run that held gives requests/s and chunks/s (and the share of the core it used).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from spec_workload import _children_cpu, compile_trees, process_tree_cpu  # noqa: E402
from truthjoin import join, load_truth  # noqa: E402
from truthserver.testing import start_truth  # noqa: E402

#: (scenario, truth-server tokens per chunk, step ms, streams option) of each comparison case
CASES: dict[str, tuple[str, str, float, str]] = {
    "qa": ("scenarios/qa.yaml", "3", 5.0, "streams"),
    "mix": ("scenarios/mix.yaml", "3", 5.0, "streams"),
    "one-token": ("scenarios/qa.yaml", "1", 10.0, "one_token_streams"),
}
ACCURACY_GOAL_MS = 1.0
RATIO_GOAL = 2.0


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


def start_client(cmd: list[str], env: dict[str, str], src: Path, **popen: Any) -> subprocess.Popen[Any]:
    """One client process of the tree at ``src`` on core 0 (its own sources first on the path)."""
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    if src != ROOT:
        env = {**env, "PYTHONPATH": str(src)}
    return subprocess.Popen(cmd, cwd=src, env={**os.environ, **env}, **popen)


def _children_system_cpu() -> float:
    """System (kernel) CPU seconds of the waited children so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def run_process(label: str, cmd: list[str], env: dict[str, str], seconds: float, src: Path = ROOT) -> dict[str, Any]:
    """One client from start to exit on core 0: whole-process CPU (and the kernel's part of it)
    and a steady mid-run window's."""
    before, before_sys = _children_cpu(), _children_system_cpu()
    start = time.monotonic()
    proc = start_client(cmd, env, src, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The tree's CPU every 0.1 s: what it had spent when the server received its first request
    # is its start-up, measured rather than fitted (a fit cannot tell it from per-request work).
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic(), process_tree_cpu(proc.pid)))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    warm = min(6.0, seconds / 3)
    window = max(2.0, seconds - warm - 3.0)
    time.sleep(warm + 1.0)
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
            "window_cpu_s": c1 - c0, "cpu_samples": samples}


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
    row["startup_cpu_s"] = max((c for when, c in row.get("cpu_samples", []) if when <= first), default=0.0)
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


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares split of CPU into per request and per chunk (``numpy.linalg.lstsq``).

    Whole process: CPU after start-up (the tree's CPU when the server received its first
    request, measured) = a x requests + b x chunks; the start-up itself is reported apart.
    Steady window: CPU share = a x requests/s + b x chunks/s -- the two-workload solve, in which
    per-second work (timers, live statistics, health sampling) lands on both. A three-term fit
    with a per-second intercept is printed too: with a few lengths at one stream count it is
    ill-conditioned (requests/s moves little), so it only shows whether the two agree.
    """
    a = np.array([[r["requests"], r["chunks"]] for r in rows], dtype=float)
    y = np.array([r["whole_cpu_s"] - r["startup_cpu_s"] for r in rows])
    (per_req, per_chunk), *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ np.array([per_req, per_chunk])
    w = np.array([[r["window_requests"] / r["window_s"], r["window_chunks"] / r["window_s"]] for r in rows])
    wy = np.array([r["window_cpu_s"] / r["window_s"] for r in rows])
    (w_req, w_chunk), *_ = np.linalg.lstsq(w, wy, rcond=None)
    wres = wy - w @ np.array([w_req, w_chunk])
    w3 = np.column_stack([np.ones(len(rows)), w])
    (per_s, w3_req, w3_chunk), *_ = np.linalg.lstsq(w3, wy, rcond=None)
    return {"startup_s": float(np.median([r["startup_cpu_s"] for r in rows])), "per_request_us": per_req * 1e6,
            "per_chunk_us": per_chunk * 1e6, "whole_resid_max_s": float(np.max(np.abs(resid))),
            "window_per_request_us": w_req * 1e6, "window_per_chunk_us": w_chunk * 1e6,
            "window_resid_max_share": float(np.max(np.abs(wres))), "per_second_share": per_s,
            "w3_per_request_us": w3_req * 1e6, "w3_per_chunk_us": w3_chunk * 1e6}


def run_split(args: argparse.Namespace, work: Path) -> None:
    """The same server and streams at each answer length, alternately; the per-request/per-chunk fit
    of each tree (this one, and ``--src`` trees side by side)."""
    truth_path = work / "split-truth.jsonl"
    trees = trees_of(args)
    rows: list[dict[str, Any]] = []
    print(f"\n== split: per request and per chunk ({stamp()})")
    with start_truth(truth_path, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     cpus="1") as srv:
        for n in range(args.repeat):
            for length in args.lengths:
                for tree, src in trees:
                    run = work / f"split-{tree}-{length}-{n}"
                    out = json.dumps({"dist": "fixed", "value": length})
                    cmd = tokenswarm_command(srv.base_url, "scenarios/qa.yaml", args.streams, args.seconds, run,
                                             [f"traffic.classes.qa.{length_field(src)}={out}",
                                              'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}'],
                                             src)
                    row = run_process(f"{tree} {length} tokens", cmd, {}, args.seconds, src)
                    row.update(run=run, length=length, tree=tree)
                    rows.append(row)
        srv.flush()
    truth = load_truth(truth_path)
    for r in rows:
        count(r, truth)
        accuracy(r, truth)
    for tree, _src in trees:
        split_table(args, [r for r in rows if r["tree"] == tree], tree)


def window_figures(r: dict[str, Any], rate_width: int) -> str:
    """A row's measured window: requests/s (``rate_width`` wide), chunks/s, CPU share, and the
    timing errors' p99 (TTFT, gap, end to end) -- the columns both tables print."""
    a = r["accuracy"]
    return (f"{r['window_requests'] / r['window_s']:>{rate_width}.0f} {r['window_chunks'] / r['window_s']:>9.0f} "
            f"{r['window_cpu_s'] / r['window_s']:>9.2f} "
            f"{a['ttft_err_p99_ms']:>12.2f} {a['gap_err_p99_ms']:>8.2f} {a['e2e_err_p99_ms']:>8.2f}")


def split_table(args: argparse.Namespace, rows: list[dict[str, Any]], tree: str) -> None:
    """One tree's split: its runs, the two fits and the ceilings they give."""
    print(f"\n-- tree: {tree}")
    print(f"truth server: one event every {args.step_ms:g} ms of {args.tokens_per_chunk} token(s), {args.streams} "
          f"streams, scenarios/qa.yaml prompts, fixed answer lengths (ignore_eos), {args.seconds:g} s each; "
          f"finished {stamp()}")
    print(f"{'answer':>7} {'requests':>9} {'chunks':>8} {'chunks/req':>10} {'whole CPU s':>11} {'start-up s':>10} {'us/chunk':>9} "
          f"{'window req/s':>12} {'chunks/s':>9} {'CPU share':>9} {'TTFT err p99':>12} {'gap p99':>8} {'e2e p99':>8}")
    for r in rows:
        print(f"{r['length']:>7} {r['requests']:>9} {r['chunks']:>8} {r['chunks'] / max(1, r['requests']):>10.1f} "
              f"{r['whole_cpu_s']:>11.2f} {r['startup_cpu_s']:>10.2f} {r['us_per_chunk'] or 0:>9.1f} {window_figures(r, 12)}")
    f = fit(rows)
    print(f"whole process: start-up {f['startup_s']:.2f} s of CPU (median, measured), then CPU = "
          f"{f['per_request_us']:.0f} us x requests + {f['per_chunk_us']:.1f} us x chunks (largest residual "
          f"{f['whole_resid_max_s']:.2f} s)")
    print(f"steady window: CPU share = {f['window_per_request_us']:.0f} us x requests/s + "
          f"{f['window_per_chunk_us']:.1f} us x chunks/s (largest residual {f['window_resid_max_share']:.3f}); "
          f"with a per-second term: {f['per_second_share']:.3f} + {f['w3_per_request_us']:.0f} us x requests/s + "
          f"{f['w3_per_chunk_us']:.1f} us x chunks/s")
    print(f"goal: fixed CPU per request <= 250 us: {'met' if f['window_per_request_us'] <= 250 else 'NOT met'} "
          f"(steady); per chunk ~5 us")
    req_us, chunk_us = f["window_per_request_us"], f["window_per_chunk_us"]
    if req_us > 0 and chunk_us > 0:
        print("ceiling of one core (1 s of CPU / (per request + chunks x per chunk), steady fit):")
        for chunks in (1, 4, 16, 64, 256):
            rps = 1e6 / (req_us + chunks * chunk_us)
            print(f"  {chunks:>4} chunks/request: {rps:>7.0f} requests/s, {rps * chunks:>7.0f} chunks/s")


def run_compare(args: argparse.Namespace, work: Path, case: str) -> None:
    """Plain Locust and tokenswarm on one shipped scenario, A B A B; ratios and accuracy.

    With ``--src`` trees, each round runs every tree, then the baseline (A B C B A C ...): every
    tree's ratio comes from the same rounds, so a change's effect on the ratio is measured in one
    run. The trees' order turns by one each round (with two trees and an even ``--repeat``, each
    runs first as often as second), so a place in the round that favours its runner does not
    favour one tree."""
    trees = trees_of(args, "tokenswarm")
    scenario, tokens, step_ms, streams_opt = CASES[case]
    streams = getattr(args, streams_opt)
    truth_path = work / f"compare-{case}-truth.jsonl"
    rows: list[dict[str, Any]] = []
    print(f"\n== {case}: {scenario} as shipped vs plain Locust ({stamp()}); baseline bodies: "
          f"{args.baseline_bodies}")
    with start_truth(truth_path, "--step-ms", str(step_ms), "--tokens-per-chunk", tokens, cpus="1") as srv:
        bodies_env: dict[str, str] = {}
        if args.baseline_bodies == "scenario":
            from bench_bodies import build_bodies, write_bodies

            bodies_path = work / f"compare-{case}-bodies.jsonl"
            bodies = build_bodies(ROOT / scenario, srv.base_url, streams, max(8, -(-2000 // streams)))
            write_bodies(bodies_path, bodies)
            bodies_env = {"BENCH_BODIES_FILE": str(bodies_path)}
            print(f"baseline bodies: {len(bodies)} built from {scenario} ({bodies_path})")
        for n in range(args.repeat):
            by_tree: dict[str, dict[str, Any]] = {}
            turn = n % len(trees)
            for tree, src in trees[turn:] + trees[:turn]:
                run = work / f"compare-{case}-{tree}-{n}"
                ts = run_process(tree, tokenswarm_command(srv.base_url, scenario, streams, args.seconds, run, [], src),
                                 {}, args.seconds, src)
                ts.update(run=run, tree=tree, place=len(by_tree) + 1)
                by_tree[tree] = ts
            tree_rows = [by_tree[tree] for tree, _src in trees]  # this tree first, as the ratios below pair them
            srv.flush()
            truth = load_truth(truth_path)
            count(tree_rows[0], truth)
            ts = tree_rows[0]
            mean_tokens = max(1, round(ts["tokens"] / max(1, ts["requests"])))
            base = run_process("baseline", baseline_command(srv.base_url, streams, args.seconds),
                               {"BENCH_MODEL": "truth", "BENCH_MAX_TOKENS": str(mean_tokens), **bodies_env},
                               args.seconds)
            if not bodies_env:
                base["max_tokens"] = mean_tokens
            rows += [*tree_rows, base]
        srv.flush()
        lateness = srv.stats()
    truth = load_truth(truth_path)
    for r in rows:
        count(r, truth)
        if "tree" in r:
            accuracy(r, truth)
    print(f"{streams} streams, one event every {step_ms:g} ms of {tokens} token(s), {args.seconds:g} s of load; "
          f"finished {stamp()}")
    print(f"{'client':<11} {'ran':>3} {'requests':>8} {'chunks':>8} {'chunks/req':>10} {'whole us/chunk':>14} "
          f"{'whole us/req':>12} {'kernel us/chunk':>15} {'window us/chunk':>15} {'TTFT err p99':>12} {'gap p99':>8} "
          f"{'e2e p99':>8}")
    for r in rows:
        a = r.get("accuracy")
        errs = (f"{a['ttft_err_p99_ms']:>12.2f} {a['gap_err_p99_ms']:>8.2f} {a['e2e_err_p99_ms']:>8.2f}" if a
                else f"{'-':>12} {'-':>8} {'-':>8}")
        label = r["label"] if "max_tokens" not in r else f"baseline@{r['max_tokens']}"
        ran = str(r["place"]) if "place" in r else "-"  # its place among the trees of its round
        print(f"{label:<11} {ran:>3} {r['requests']:>8} {r['chunks']:>8} {r['chunks'] / max(1, r['requests']):>10.1f} "
              f"{r['us_per_chunk'] or 0:>14.1f} {r['whole_cpu_s'] / max(1, r['requests']) * 1e6:>12.0f} "
              f"{r['system_us_per_chunk'] or 0:>15.1f} {r['window_us_per_chunk'] or 0:>15.1f} {errs}")
    per_round = len(trees) + 1
    rounds = [rows[i:i + per_round] for i in range(0, len(rows), per_round)]
    for k, (tree, _src) in enumerate(trees):
        pairs = [(r[k], r[-1]) for r in rounds]
        whole = sorted(b["us_per_chunk"] / t["us_per_chunk"] for t, b in pairs if b["us_per_chunk"] and t["us_per_chunk"])
        steady = sorted(b["window_us_per_chunk"] / t["window_us_per_chunk"] for t, b in pairs
                        if b["window_us_per_chunk"] and t["window_us_per_chunk"])
        name = "tokenswarm" if tree == "tokenswarm" else f"tokenswarm at {tree}"
        if whole:
            w = statistics.median(whole)
            print(f"whole-process CPU per chunk, baseline / {name}: {w:.2f}x (pairs: "
                  f"{', '.join(f'{x:.2f}x' for x in whole)}); goal >= {RATIO_GOAL:.0f}x: "
                  f"{'met' if w >= RATIO_GOAL else 'NOT met'}")
        if steady:
            print(f"steady-window CPU per chunk, baseline / {name}: {statistics.median(steady):.2f}x")
        # The kernel's part (system CPU: reads, polls, the ACKs a read sends on loopback) is paid
        # per chunk by every client; what is left is each client's own work.
        user = sorted((b["whole_cpu_s"] - b["whole_system_cpu_s"]) / b["chunks"]
                      / ((t["whole_cpu_s"] - t["whole_system_cpu_s"]) / t["chunks"])
                      for t, b in pairs if t["chunks"] and b["chunks"] and t["whole_cpu_s"] > t["whole_system_cpu_s"])
        kernel = [(t["system_us_per_chunk"], b["system_us_per_chunk"]) for t, b in pairs
                  if t["system_us_per_chunk"] and b["system_us_per_chunk"]]
        if user and kernel:
            print(f"user-space CPU per chunk, baseline / {name}: {statistics.median(user):.2f}x; kernel CPU per "
                  f"chunk, {name} / baseline: {statistics.median(k for k, _ in kernel):.1f} / "
                  f"{statistics.median(b for _, b in kernel):.1f} us")
    errs = [r["accuracy"] for r in rows if r.get("accuracy") and r["accuracy"]["joined"]]
    if errs:
        worst = {k: max(e[k] for e in errs) for k in ("ttft_err_p99_ms", "gap_err_p99_ms", "e2e_err_p99_ms")}
        ok = all(v <= ACCURACY_GOAL_MS for v in worst.values())
        print(f"tokenswarm accuracy (worst run): TTFT error p99 {worst['ttft_err_p99_ms']:.2f} ms, chunk gap "
              f"{worst['gap_err_p99_ms']:.2f} ms, e2e {worst['e2e_err_p99_ms']:.2f} ms; goal <= "
              f"{ACCURACY_GOAL_MS:.0f} ms: {'met' if ok else 'NOT met'}")
    print(f"truth server lateness: {json.dumps(lateness)[:200]}")


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("split", "compare", "ceiling", "idle"),
                    help="one part only (default: split and compare; the ceiling and idle run only when asked)")
    ap.add_argument("--ceiling-lengths", type=int, nargs="+", default=[12, 192],
                    help="ceiling: answer lengths, short and long (tokens)")
    ap.add_argument("--ceiling-streams", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
                    help="ceiling: the loads tried, lowest first")
    ap.add_argument("--lengths", type=int, nargs="+", default=[12, 48, 192], help="answer lengths of the split (tokens)")
    ap.add_argument("--streams", type=int, default=96)
    ap.add_argument("--one-token-streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--repeat", type=int, default=2, help="rounds (the split's lengths, the comparison's pairs)")
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--tokens-per-chunk", default="3")
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--baseline-bodies", choices=("scenario", "plain"), default="scenario",
                    help="the baseline's requests: the scenario's own bodies, built by tokenswarm's workload code "
                         "(default), or the two-word prompt at tokenswarm's mean answer length (the earlier runs)")
    ap.add_argument("--src", action="append", metavar="DIR",
                    help="split, compare and idle: also run the tokenswarm of this checkout (C extension built in "
                         "place), in the same rounds")
    ap.add_argument("--keep", type=Path, help="keep the runs and truth logs here")
    args = ap.parse_args()
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"started {stamp()}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="tokenswarm-reqcost-"))
    work.mkdir(parents=True, exist_ok=True)
    compile_trees(argparse.Namespace(spec_src=args.src))
    if args.only in (None, "split"):
        run_split(args, work)
    if args.only == "ceiling":
        run_ceiling(args, work)
    if args.only == "idle":
        run_idle(args, work)
    if args.only in (None, "compare"):
        for case in args.cases:
            run_compare(args, work, case)
    print(f"\nfinished {stamp()}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
