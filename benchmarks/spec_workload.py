"""generator.py --workload spec: whole-process CPU per chunk on speculative-decoding traffic.

Kept apart from generator.py's one-token benchmark because it measures differently: each
client runs to completion as a user's machine runs it, and is charged everything it spent
(start-up, ramp, teardown), against a server tokenswarm was not tuned to (the uvicorn truth
server). The steady window is printed beside it so the per-request share is visible.
"""

from __future__ import annotations

import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
from truthjoin import join, load_truth
from truthserver.testing import start_truth

ROOT = Path(__file__).resolve().parents[1]


def process_tree_sum(pid: int, measure: Callable[[psutil.Process], float]) -> float:
    """``measure`` summed over a process and its children now (0 once it is gone; a child
    that ends meanwhile counts 0)."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            total += measure(p)
        except psutil.NoSuchProcess:
            pass
    return total


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def steady_window(seconds: float, warm_s: float | None = None) -> tuple[float, float]:
    """When a client's steady window starts (seconds after its launch) and how long it lasts, for a
    run of ``seconds``: after start-up and ramp (``warm_s``, default a third of the run up to 6 s,
    plus 1 s), and ending 2 s or more before shutdown (at least 2 s long)."""
    warm = warm_s if warm_s is not None else min(6.0, seconds / 3)
    return warm + 1.0, max(2.0, seconds - warm - 3.0)


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children so far (0 once it is gone)."""
    return process_tree_sum(pid, _cpu_s)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def client_command(kind: str, host: str, args, run: Path) -> tuple[list[str], dict[str, str]]:
    """The command and extra environment of one client; ``tokenswarm@DIR`` runs DIR's tokenswarm."""
    common = ["--headless", "--host", host, "-u", str(args.spec_streams), "-r", str(args.spec_streams),
              "-t", f"{int(args.seconds)}s", "--only-summary", "--stop-timeout", "5"]
    if kind == "baseline":
        return ([sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "baseline_locustfile.py"), *common],
                {"BENCH_MODEL": "truth", "BENCH_MAX_TOKENS": str(args.spec_output_tokens)})
    out = json.dumps({"dist": "fixed", "value": args.spec_output_tokens})
    src, env = ROOT, {}
    if kind.startswith("tokenswarm@"):  # another checkout (C extensions built in place), side by side
        src = Path(kind.split("@", 1)[1])
        env = {"PYTHONPATH": str(src)}
    return ([sys.executable, "-m", "locust", "-f", str(src / "locustfiles" / "llm.py"),
             "--scenario", str(ROOT / "scenarios" / "qa.yaml"), "--out", str(run), *common,
             "--set", f"traffic.classes.qa.max_tokens={out}",
             "--set", 'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}',
             "--set", "target.metrics_url=null", "--set", "slo={}"], env)


def run_whole(kind: str, srv, args, work: Path, n: int) -> dict:
    """One client from start to exit; CPU of the whole process, and of a steady mid-run window."""
    import os

    run = work / f"spec-{kind.replace('/', '_')}-{n}"
    cmd, env = client_command(kind, srv.base_url, args, run)
    before = _children_cpu()
    start = time.monotonic()
    cwd = Path(env["PYTHONPATH"]) if "PYTHONPATH" in env else ROOT  # python -m puts the cwd first on sys.path
    if shutil.which("taskset"):  # the client on core 0, the truth server alone on core 1: neither slows the other
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait, window = steady_window(args.seconds)
    time.sleep(wait)
    c0, t0 = process_tree_cpu(proc.pid), time.monotonic()
    time.sleep(window)
    c1, t1 = process_tree_cpu(proc.pid), time.monotonic()
    _out, err = proc.communicate(timeout=args.seconds + 180)
    end = time.monotonic()
    whole_cpu = _children_cpu() - before
    if proc.returncode not in (0, 1):  # 1: Locust counts a failed request; the rows show the counts
        raise SystemExit(f"{kind} client failed ({proc.returncode}): {err[-2000:]}")
    return {"kind": kind, "run": run, "start": start, "end": end, "window": (t0, t1), "whole_cpu_s": whole_cpu,
            "window_cpu_s": c1 - c0, "wall_s": end - start}


def count_chunks(row: dict, truth: dict[str, dict]) -> None:
    """Chunks and requests the server sent this client, whole run and steady window."""
    start, end = row["start"], row["end"]
    t0, t1 = row["window"]
    mine = [t for t in truth.values() if start <= t["received"] <= end]
    row["requests"] = sum(1 for t in mine if t.get("outcome") == "ok")
    row["chunks"] = sum(len(t["chunks"]) for t in mine)
    row["window_chunks"] = sum(1 for t in mine for c in t["chunks"] if t0 <= c[0] <= t1)
    row["us_per_chunk"] = row["whole_cpu_s"] / row["chunks"] * 1e6 if row["chunks"] else None
    row["us_per_request"] = row["whole_cpu_s"] / row["requests"] * 1e6 if row["requests"] else None
    row["window_us_per_chunk"] = row["window_cpu_s"] / row["window_chunks"] * 1e6 if row["window_chunks"] else None
    row["window_share"] = row["window_cpu_s"] / (t1 - t0)


def add_accuracy(row: dict, truth: dict[str, dict]) -> None:
    """A tokenswarm row's timing errors against the truth server, over the steady window.

    Its records are joined to the server's truth log by response id; requests the server
    received inside the window count (received is CLOCK_MONOTONIC, like this process's
    ``time.monotonic``). The baseline keeps no per-request times, so only tokenswarm rows have this.
    """
    t0, t1 = row["window"]
    window = {t["id"]: t for t in truth.values() if t.get("outcome") == "ok" and t0 <= t["received"] <= t1}
    path = row["run"] / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    row["accuracy"] = join([(r["response_id"], r["ttft_ms"], r["chunk_offsets_ms"]) for r in records
                            if r["outcome"] == "ok" and r["response_id"] in window], window)


def spec_cases(args) -> list[tuple[int, str, float]]:
    """(streams, tokens per chunk, step ms) of each case: the speculative one, then one-token chunks."""
    cases = [(args.spec_streams, str(args.spec_tokens_per_chunk), args.spec_step_ms)]
    if getattr(args, "spec_one_token_streams", 0):
        cases.append((args.spec_one_token_streams, "1", args.spec_one_token_step_ms))
    return cases


def compile_trees(args) -> None:
    """Byte-compile every tokenswarm tree the benchmark runs, as installing it does.

    Locust is installed (compiled); a checkout run with PYTHONDONTWRITEBYTECODE set (as on this
    project's machine) would otherwise compile tokenswarm's sources on every client start and
    charge that to it.
    """
    import compileall

    for src in [ROOT, *(Path(d).resolve() for d in getattr(args, "spec_src", None) or [])]:
        for sub in ("tokenswarm", "analysis", "locustfiles"):
            if (src / sub).is_dir():
                compileall.compile_dir(str(src / sub), quiet=1, workers=0)
    compileall.compile_file(str(ROOT / "benchmarks" / "baseline_locustfile.py"), quiet=1)


def run_spec_workload(args, work: Path) -> None:
    compile_trees(args)
    for streams, tokens, step_ms in spec_cases(args):
        run_spec_case(args, work, streams, tokens, step_ms)


def run_spec_case(args, work: Path, streams: int, tokens_per_chunk: str, step_ms: float) -> None:
    """One case, A B A B, against its own truth server; prints its table, ratios and ceilings."""
    args.spec_streams = streams  # client_command reads the case's streams from args
    truth_path = work / f"spec-truth-{streams}x{tokens_per_chunk}.jsonl"
    rows: list[dict] = []
    kinds = ["baseline", *(f"tokenswarm@{Path(d).resolve()}" for d in getattr(args, "spec_src", None) or []),
             "tokenswarm"]
    with start_truth(truth_path, "--step-ms", str(step_ms), "--tokens-per-chunk",
                     tokens_per_chunk, cpus="1") as srv:
        for n in range(args.repeat):  # A B A B: slow drifts of the machine hit all alike
            for kind in kinds:
                rows.append(run_whole(kind, srv, args, work, n))
        srv.flush()
        lateness = srv.stats()
    truth = load_truth(truth_path)
    for r in rows:
        count_chunks(r, truth)
        if r["kind"] != "baseline":
            add_accuracy(r, truth)
    print(f"\n{streams} streams, one event every {step_ms:g} ms with {tokens_per_chunk} token(s), "
          f"{args.spec_output_tokens}-token answers, scenarios/qa.yaml prompts; uvicorn truth server on core 1; "
          f"whole process = start to exit, {args.seconds:g} s of load")
    print(f"{'client':<24} {'chunks':>8} {'requests':>8} {'chunks/req':>10} {'whole us/chunk':>14} "
          f"{'us/request':>10} {'window us/chunk':>15} {'window CPU':>10}")
    for r in rows:
        per_req = r["chunks"] / r["requests"] if r["requests"] else 0
        print(f"{_label(r['kind']):<24} {r['chunks']:>8} {r['requests']:>8} {per_req:>10.1f} {r['us_per_chunk'] or 0:>14.1f} "
              f"{r['us_per_request'] or 0:>10.0f} {r['window_us_per_chunk'] or 0:>15.1f} {r['window_share']:>10.2f}")
    for kind in kinds[1:]:
        pairs = [(b, t) for b, t in zip(rows[0::len(kinds)], rows[kinds.index(kind)::len(kinds)])]

        def ratio(key: str, pairs: list = pairs) -> list[float]:
            return sorted(b[key] / t[key] for b, t in pairs if b[key] and t[key])

        whole, steady, per_request = ratio("us_per_chunk"), ratio("window_us_per_chunk"), ratio("us_per_request")
        name = _label(kind)
        if whole:
            w = statistics.median(whole)
            print(f"whole-process CPU per chunk, baseline / {name}: {w:.2f}x (pairs: "
                  f"{', '.join(f'{x:.2f}x' for x in whole)}); goal >= 2.00x: {'met' if w >= 2.0 else 'NOT met'}")
        if steady:
            print(f"steady-window CPU per chunk, baseline / {name}: {statistics.median(steady):.2f}x")
        if per_request:
            print(f"whole-process CPU per request, baseline / {name}: {statistics.median(per_request):.2f}x")
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind and r["us_per_chunk"] and r["us_per_request"]]
        if not mine:
            continue
        us = statistics.median(r["us_per_chunk"] for r in mine)
        us_req = statistics.median(r["us_per_request"] for r in mine)
        steady_us = statistics.median(r["window_us_per_chunk"] or 0 for r in mine)
        print(f"{_label(kind)}: {us:.1f} us/chunk whole process ({steady_us:.1f} steady), {us_req:.0f} us/request; "
              f"ceiling per core {1e6 / us:.0f} chunks/s, {1e6 / us_req:.0f} requests/s")
    for r in rows:
        a = r.get("accuracy")
        if a and a["joined"]:
            print(f"{_label(r['kind'])} timing errors vs the truth server, steady window, {a['joined']} of "
                  f"{a['requests']} requests joined: TTFT p50/p99 {a['ttft_err_p50_ms']:.2f}/{a['ttft_err_p99_ms']:.2f} ms, "
                  f"chunk gap p50/p99 {a['gap_err_p50_ms']:.2f}/{a['gap_err_p99_ms']:.2f} ms (goal: p99 <= 2 ms)")
    print(f"truth server lateness over the runs: {json.dumps(lateness)[:300]}")


def _label(kind: str) -> str:
    """``tokenswarm@/path/to/checkout`` as ``tokenswarm@checkout``."""
    return kind if "@" not in kind else "tokenswarm@" + Path(kind.split("@", 1)[1]).name
