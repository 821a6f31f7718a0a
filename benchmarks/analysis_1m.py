"""Benchmark: analyse a run of 1,000,000 records with ~100 chunks each, end to end.

Generates a realistic run directory in a temp dir (4 concurrency steps with warm-up, 4 tasks,
~100 content chunks per request with speculative-decoding-like 1..4 tokens per chunk, 1 %
failures, server-metric scrapes), then times ``load_run`` + ``analyse`` + writing the
report (summary.json, CSVs, report.md/html with plots) on one core, and prints where the
time goes and the peak RSS. Goal: < 60 s and < 2 GiB.

    .venv/bin/python benchmarks/analysis_1m.py [--records 1000000] [--keep DIR] [--no-plots]

Generation is not part of the measured time (it runs in a child process so its memory does
not count in the analysis' peak RSS).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.benchrun import bench_args, cpu_s, generate_in_child, load_average, peak_rss_gib, work_dir
from tokenswarm.record import FORMAT_VERSION

T0 = 1_764_480_000.0
TASKS = ("qa", "summarization", "code", "multi_turn")
STEPS = (8, 16, 32, 64)


def generate(run_dir: Path, n_records: int, seed: int = 0, batch: int = 20_000) -> None:
    """Write manifest.json, records.jsonl and server_metrics.jsonl for ``n_records`` requests."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    per_step = n_records // len(STEPS)
    step_len_s = 900.0
    steps = [
        {"index": i, "name": f"c{c}", "kind": "concurrency", "target": c, "started_at": T0 + i * step_len_s,
         "steady_at": T0 + i * step_len_s + 60, "ended_at": T0 + (i + 1) * step_len_s}
        for i, c in enumerate(STEPS)
    ]
    manifest = {
        "format_version": FORMAT_VERSION, "run_id": "bench-1m", "tokenswarm_version": "0.1.0", "scenario_name": "mix",
        "scenario": {"slo": {"ttft_p95_ms": 400, "tpot_p99_ms": 40, "error_rate": 0.02},
                     "cost": {"gpu_hour_usd": 2.5, "gpus": 1}},
        "target": {"base_url": "http://127.0.0.1:8000", "model": "sim-27b"}, "load_mode": "closed",
        "started_at": T0, "ended_at": T0 + len(STEPS) * step_len_s, "steps": steps,
        "workers": [], "totals": {"records_lost": 0},
        "generator_health": {"cpu_warning": False, "max_loop_lag_ms": 3.0, "late_dispatches": 0}, "warnings": [],
    }
    (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest))
    dumps = orjson.dumps
    with open(run_dir / "records.jsonl", "wb") as fh:
        seq = 0
        for start in range(0, n_records, batch):
            n = min(batch, n_records - start)
            idx = np.arange(start, start + n)
            step = np.minimum(idx // per_step, len(STEPS) - 1)
            load = np.array(STEPS)[step]
            sent = T0 + step * step_len_s + (idx % per_step) / per_step * step_len_s
            phase_warm = (idx % per_step) / per_step * step_len_s < 60
            n_chunks = np.clip(rng.normal(100, 30, n).astype(int), 2, 300)
            ttft = rng.gamma(4.0, 25.0 + load, n)
            fail = rng.random(n) < 0.01
            task = rng.integers(0, len(TASKS), n)
            total_chunks = int(n_chunks.sum())
            gaps = rng.gamma(3.0, 1.0, total_chunks - n) * np.repeat(6.0 + load / 8.0, n_chunks - 1)
            toks = rng.integers(1, 5, total_chunks)
            gptr = np.concatenate([[0], np.cumsum(n_chunks - 1)])
            tptr = np.concatenate([[0], np.cumsum(n_chunks)])
            lines = []
            for j in range(n):
                k = int(idx[j])
                if fail[j]:
                    rec = {"run_id": "bench-1m", "worker_id": "w0", "seq": seq, "task": TASKS[task[j]],
                           "user_class": "U", "outcome": "timeout", "request_key": hashlib.sha256(b"%d" % k).hexdigest(),
                           "scheduled_at_s": float(sent[j]), "sent_at_s": float(sent[j]), "schedule_lag_ms": 0.0,
                           "step": int(step[j]), "phase": "warmup" if phase_warm[j] else "steady",
                           "session_id": None, "turn": None, "api": "chat", "model": "sim-27b",
                           "ttft_ms": None, "e2e_ms": None, "chunk_offsets_ms": [], "chunk_tokens": None,
                           "prompt_tokens": 200, "output_tokens": None, "tokens_estimated": False,
                           "finish_reason": None, "http_status": None, "error": "total timeout",
                           "response_id": None, "output_sha256": None, "output_text": None, "max_tokens": 512,
                           "temperature": 0.0, "spec_decode": None, "extra": None}
                else:
                    g = gaps[gptr[j]:gptr[j + 1]]
                    offs = np.empty(n_chunks[j])
                    offs[0] = ttft[j]
                    np.cumsum(g, out=offs[1:])
                    offs[1:] += ttft[j]
                    offs = np.round(offs, 3)
                    t = toks[tptr[j]:tptr[j + 1]]
                    t[0] = 1
                    rec = {"run_id": "bench-1m", "worker_id": "w0", "seq": seq, "task": TASKS[task[j]],
                           "user_class": "U", "outcome": "ok", "request_key": hashlib.sha256(b"%d" % k).hexdigest(),
                           "scheduled_at_s": float(sent[j]), "sent_at_s": float(sent[j]), "schedule_lag_ms": 0.0,
                           "session_id": None, "turn": None,
                           "step": int(step[j]), "phase": "warmup" if phase_warm[j] else "steady", "api": "chat",
                           "model": "sim-27b", "ttft_ms": float(offs[0]), "e2e_ms": float(offs[-1] + 1.5),
                           "chunk_offsets_ms": offs.tolist(), "chunk_tokens": t.tolist(), "prompt_tokens": 200,
                           "output_tokens": int(t.sum()), "tokens_estimated": False, "finish_reason": "length",
                           "http_status": 200, "error": None, "response_id": f"chatcmpl-{k}",
                           "output_sha256": hashlib.sha256(b"o%d" % k).hexdigest(), "output_text": None,
                           "max_tokens": 512, "temperature": 0.0, "spec_decode": None, "extra": None}
                seq += 1
                lines.append(dumps(rec))
            lines.append(b"")
            fh.write(b"\n".join(lines))
    with open(run_dir / "server_metrics.jsonl", "wb") as fh:
        drafts = acc = dtok = 0.0
        for i in range(int(len(STEPS) * step_len_s / 5) + 2):
            drafts += 5000
            dtok += 15000
            acc += 9000
            samples = [
                {"name": "vllm:spec_decode_num_drafts_total", "labels": {"engine": "0"}, "value": drafts},
                {"name": "vllm:spec_decode_num_draft_tokens_total", "labels": {"engine": "0"}, "value": dtok},
                {"name": "vllm:spec_decode_num_accepted_tokens_total", "labels": {"engine": "0"}, "value": acc},
                {"name": "vllm:num_requests_waiting", "labels": {"engine": "0"}, "value": float(i % 7)},
                {"name": "vllm:kv_cache_usage_perc", "labels": {"engine": "0"}, "value": 0.5},
            ] + [{"name": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                  "labels": {"engine": "0", "position": str(p)}, "value": acc * w} for p, w in enumerate((0.5, 0.3, 0.2))]
            fh.write(dumps({"scraped_at": T0 + 5 * i, "source": "target", "step": None, "error": None,
                            "samples": samples}) + b"\n")


def analyse_timed(run_dir: Path, out_dir: Path, with_plots: bool) -> dict:
    """Load, analyse and write; returns (wall s, CPU s) per phase."""
    import tokenswarm.analysis.summary as summary_mod
    from tokenswarm.analysis.loader import load_run
    from tokenswarm.analysis.report import write_report
    from tokenswarm.analysis.summary import analyse

    times: dict[str, tuple[float, float]] = {}

    def timed(label, fn):
        def wrapper(*a, **kw):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                w, c = times.get(label, (0.0, 0.0))
                times[label] = (w + time.perf_counter() - t0, c + time.process_time() - c0)
        return wrapper

    # Time the parts of analyse() from inside its single call.
    for name, label in (("step_table", "  analyse: step tables (latency, throughput, goodput)"),
                        ("spec_decode_tables", "  analyse: speculative decoding"),
                        ("soak", "  analyse: time windows / drift"),
                        ("curves", "  analyse: curves")):
        setattr(summary_mod, name, timed(label, getattr(summary_mod, name)))
    run = timed("load_run (parse records.jsonl into columns)", load_run)(run_dir)
    summary = timed("analyse total", analyse)(run)
    timed("write report (json, csv, md, html" + (", plots)" if with_plots else ")"), write_report)(
        run, summary, out_dir, with_plots=with_plots)
    times["_records"] = len(run)
    times["_chunk_gaps"] = int(run.gap_ms.size)
    return times


def main() -> int:
    args = bench_args(__doc__, 1_000_000)
    with work_dir(args.keep, "tokenswarm-bench-") as tmp:
        run_dir = tmp / "run"
        if not (run_dir / "records.jsonl").exists():
            t = time.perf_counter()
            generate_in_child(generate, run_dir, args.records)
            print(f"generated {args.records:,} records in {time.perf_counter() - t:.1f} s "
                  f"({(run_dir / 'records.jsonl').stat().st_size / 2**30:.2f} GiB)")
        t, cpu0 = time.perf_counter(), cpu_s()
        times = analyse_timed(run_dir, tmp / "report", not args.no_plots)
        total, cpu = time.perf_counter() - t, cpu_s() - cpu0
        peak = peak_rss_gib()
        print(f"records: {times.pop('_records'):,}, chunk gaps: {times.pop('_chunk_gaps'):,}")
        print(f"  {'phase':<62} {'wall s':>7} {'CPU s':>7}")
        order = [k for k in times if not k.startswith("  ")]
        for k in order:
            print(f"  {k:<62} {times[k][0]:7.1f} {times[k][1]:7.1f}")
            if k == "analyse total":
                for sub in (x for x in times if x.startswith("  ")):
                    print(f"  {sub:<62} {times[sub][0]:7.1f} {times[sub][1]:7.1f}")
        print(f"total end to end (excl. generation): {total:.1f} s wall, {cpu:.1f} s CPU "
              f"(goal < 60 s) -> {'OK' if total < 60 else 'SLOW'} by wall clock, {'OK' if cpu < 60 else 'SLOW'} by CPU time")
        print(f"machine load average during the run: {load_average()} on {os.cpu_count()} cores "
              "(other processes share the CPU: wall time > CPU time)")
        print(f"peak RSS: {peak:.2f} GiB (goal < 2 GiB) -> {'OK' if peak < 2 else 'TOO BIG'}")
        print(f"CPU: 1 process; os.cpu_count()={os.cpu_count()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
