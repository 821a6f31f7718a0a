"""Benchmark: a soak-scale run in the Parquet store -- 10,000,000 records with ~100 chunks each.

Generates the run directly as store parts (vectorised with numpy/pyarrow, in a child process
so its memory does not count), then measures, in this process, ``load_run`` + ``analyse`` +
writing the report, with wall time, CPU time (``resource.getrusage``) and the peak RSS. Goal:
< 60 s and < 4 GiB on one core. It also prints the master's write cost per record for both
formats (JSON lines in, as workers send them) and the disk size per million records of both.

    python benchmarks/analysis_10m.py [--records 10000000] [--chunks 100] [--keep DIR] [--no-plots]

The run has the layout of ``benchmarks/analysis_1m.py`` (4 concurrency steps with warm-up,
4 tasks, 1..4 tokens per chunk, 1 % timeouts, server scrapes). ITL and inter-chunk
percentiles come from the store's histograms (stated precision printed below); the unit
test ``tests/analysis/test_columnar.py`` checks them against the exact path.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.analysis_1m import STEPS, T0, TASKS
from benchmarks.benchrun import bench_args, cpu_s, generate_in_child, load_average, peak_rss_gib, work_dir
from tokenswarm.record import FORMAT_VERSION

GROUP = 65536  # records per row group / part (the writer's default)
STEP_LEN_S = 900.0


def _hex(rng: np.random.Generator, n: int) -> pa.Array:
    """``n`` random 64-character hex strings (sha256-like keys), without Python strings."""
    nib = rng.integers(0, 16, size=(n, 64), dtype=np.uint8)
    chars = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nib]
    return pa.array(np.ascontiguousarray(chars).view("S64").ravel()).cast(pa.string())


def _batch(rng: np.random.Generator, start: int, n: int, n_records: int, mean_chunks: int) -> pa.Table:
    from tokenswarm.collect.parquet_store import SCHEMA

    idx = np.arange(start, start + n)
    per_step = n_records // len(STEPS)
    step = np.minimum(idx // per_step, len(STEPS) - 1)
    load = np.array(STEPS)[step]
    pos = (idx - step * per_step) / per_step * STEP_LEN_S
    sent = T0 + step * STEP_LEN_S + pos
    warm = pos < 60
    fail = rng.random(n) < 0.01
    k = np.where(fail, 0, np.clip(rng.normal(mean_chunks, mean_chunks * 0.3, n).astype(np.int64), 2, 3 * mean_chunks))
    ttft = rng.gamma(4.0, 25.0 + load, n)
    total = int(k.sum())
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(k, out=ptr[1:])
    # offsets: ttft at each stream's first chunk, then a running sum of gamma gaps within the stream
    steps_ms = rng.gamma(3.0, 1.0, total) * np.repeat(6.0 + load / 8.0, k)
    first = ptr[:-1][k > 0]
    steps_ms[first] = ttft[k > 0]
    run_sum = np.cumsum(steps_ms)
    base = np.repeat(run_sum[first] - steps_ms[first], k[k > 0])
    offs = np.round(run_sum - base, 3)
    toks = rng.integers(1, 5, total).astype(np.int32)
    toks[first] = 1
    out_tok = np.add.reduceat(toks, first) if first.size else np.zeros(0, dtype=np.int32)
    last = offs[ptr[1:][k > 0] - 1]
    ok = ~fail

    def opt(values: np.ndarray, mask: np.ndarray, typ: pa.DataType) -> pa.Array:
        full = np.zeros(n, dtype=values.dtype) if values.size != n else values
        if values.size != n:
            full[mask] = values
        return pa.array(full, type=typ, mask=~mask)

    list_off = pa.array(ptr.astype(np.int32))
    null_lists = pa.array(fail)
    cols = {
        "run_id": pa.array(["bench-10m"] * n), "worker_id": pa.array(np.array(["w0", "w1", "w2", "w3"])[idx % 4]),
        "seq": pa.array(idx // 4), "task": pa.array(np.array(TASKS)[rng.integers(0, len(TASKS), n)]),
        "user_class": pa.array(["U"] * n), "outcome": pa.array(np.where(fail, "timeout", "ok")),
        "request_key": _hex(rng, n), "scheduled_at_s": pa.array(sent), "sent_at_s": pa.array(sent),
        "schedule_lag_ms": pa.array(np.zeros(n)), "step": pa.array(step),
        "phase": pa.array(np.where(warm, "warmup", "steady")), "api": pa.array(["chat"] * n),
        "model": pa.array(["sim-27b"] * n),
        "ttft_ms": opt(offs[first], ok, pa.float64()), "e2e_ms": opt(last + 1.5, ok, pa.float64()),
        "chunk_offsets_ms": pa.ListArray.from_arrays(list_off, pa.array(offs)),
        "chunk_tokens": pa.ListArray.from_arrays(list_off, pa.array(toks), mask=null_lists),
        "prompt_tokens": pa.array(np.full(n, 200)), "output_tokens": opt(out_tok.astype(np.int64), ok, pa.int64()),
        "tokens_estimated": pa.array(np.zeros(n, dtype=bool)),
        "finish_reason": pa.array(np.where(fail, None, "length")),
        "http_status": opt(np.full(n, 200), ok, pa.int64()),
        "error": pa.array(np.where(fail, "total timeout", None)),
        "output_sha256": pa.array(_hex(rng, n).to_numpy(zero_copy_only=False), mask=fail, type=pa.string()),
        "max_tokens": pa.array(np.full(n, 512)), "temperature": pa.array(np.zeros(n)),
    }
    arrays = [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def generate(run_dir: Path, n_records: int, mean_chunks: int, seed: int = 0) -> None:
    """manifest.json, records-NNNNNN.parquet parts and server_metrics.jsonl of ``n_records`` requests."""
    from tokenswarm.collect.parquet_store import write_part

    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = [{"index": i, "name": f"c{c}", "kind": "concurrency", "target": c, "started_at": T0 + i * STEP_LEN_S,
              "steady_at": T0 + i * STEP_LEN_S + 60, "ended_at": T0 + (i + 1) * STEP_LEN_S} for i, c in enumerate(STEPS)]
    manifest = {
        "format_version": FORMAT_VERSION, "run_id": "bench-10m", "tokenswarm_version": "0.1.0", "scenario_name": "mix",
        "scenario": {"slo": {"ttft_p95_ms": 400, "tpot_p99_ms": 40, "error_rate": 0.02},
                     "cost": {"gpu_hour_usd": 2.5, "gpus": 1}},
        "target": {"base_url": "http://127.0.0.1:8000", "model": "sim-27b"}, "load_mode": "soak",
        "records_store": {"format": "parquet", "format_version": 1}, "started_at": T0, "ended_at": T0 + len(STEPS) * STEP_LEN_S, "steps": steps,
        "workers": [], "totals": {"records_lost": 0},
        "generator_health": {"cpu_warning": False, "max_loop_lag_ms": 3.0, "late_dispatches": 0}, "warnings": [],
    }
    (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest))
    for part, start in enumerate(range(0, n_records, GROUP), 1):
        write_part(_batch(rng, start, min(GROUP, n_records - start), n_records, mean_chunks), run_dir, part)
    with open(run_dir / "server_metrics.jsonl", "wb") as fh:
        for i in range(int(len(STEPS) * STEP_LEN_S / 5) + 2):
            samples = [{"name": "vllm:num_requests_waiting", "labels": {"engine": "0"}, "value": float(i % 7)},
                       {"name": "vllm:kv_cache_usage_perc", "labels": {"engine": "0"}, "value": 0.5}]
            fh.write(orjson.dumps({"scraped_at": T0 + 5 * i, "source": "target", "step": None, "error": None,
                                   "samples": samples}) + b"\n")


def write_costs(run_dir: Path, sample: int = 20_000) -> dict[str, float]:
    """CPU per record of the master's writers (JSON lines in) and disk bytes per record of both formats."""
    import pyarrow.parquet as pq

    from tokenswarm.collect.parquet_store import ParquetRecordsWriter
    from tokenswarm.collect.writer import RecordsWriter

    first = sorted(run_dir.glob("records-*.parquet"))[0]
    rows = pq.read_table(first).slice(0, sample).to_pylist()
    lines = [orjson.dumps(r) + b"\n" for r in rows]
    n = len(lines)
    out: dict[str, float] = {"records": n}
    for name, make in (("jsonl", lambda d: RecordsWriter(d)), ("parquet", lambda d: ParquetRecordsWriter(d))):
        d = Path(tempfile.mkdtemp(prefix=f"tokenswarm-write-{name}-"))
        try:
            w = make(d)
            c0, t0 = cpu_s(), time.perf_counter()
            for i in range(0, n, 500):  # batches of 500 lines, as workers ship them
                w.write_lines(b"".join(lines[i:i + 500]), len(lines[i:i + 500]))
            w.close()
            out[f"{name}_write_cpu_us_per_record"] = (cpu_s() - c0) / n * 1e6
            out[f"{name}_write_wall_us_per_record"] = (time.perf_counter() - t0) / n * 1e6
            out[f"{name}_disk_bytes_per_record"] = sum(p.stat().st_size for p in d.iterdir()) / n
        finally:
            shutil.rmtree(d, ignore_errors=True)
    parts = list(run_dir.glob("records-*.parquet"))
    out["store_disk_bytes_per_record"] = (sum(p.stat().st_size for p in parts)
                                          / sum(pq.ParquetFile(p).metadata.num_rows for p in parts))
    return out


def analyse_timed(run_dir: Path, out_dir: Path, with_plots: bool) -> tuple[dict, dict]:
    from tokenswarm.analysis.loader import load_run
    from tokenswarm.analysis.report import write_report
    from tokenswarm.analysis.summary import analyse

    times: dict[str, tuple[float, float]] = {}

    def timed(label, fn, *a, **kw):
        c0, t0 = cpu_s(), time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            times[label] = (time.perf_counter() - t0, cpu_s() - c0)

    run = timed("load_run (read the store: columns + chunk histograms)", load_run, run_dir)
    summary = timed("analyse (step tables, spec decode, soak windows/drift, curves)", analyse, run)
    timed("write report (json, csv, md, html" + (", plots)" if with_plots else ")"), write_report,
          run, summary, out_dir, with_plots=with_plots)
    ch = run.chunk_hists
    info = {"records": len(run), "chunk_gaps": int(ch.gaps.sum()) if ch is not None else 0, "summary": summary}
    return times, info


def main() -> int:
    args = bench_args(__doc__, 10_000_000, ("--chunks", {"type": int, "default": 100, "help": "mean chunks per request"}))
    with work_dir(args.keep, "tokenswarm-bench10m-") as tmp:
        run_dir = tmp / "run"
        if not (run_dir / "manifest.json").exists():
            t = time.perf_counter()
            exitcode = generate_in_child(generate, run_dir, args.records, args.chunks)
            if exitcode:
                print(f"generation failed (exit code {exitcode})")
                return 1
            size = sum(f.stat().st_size for f in run_dir.glob("records-*.parquet"))
            print(f"generated {args.records:,} records in {time.perf_counter() - t:.1f} s ({size / 2**30:.2f} GiB)")
        wall0, cpu0 = time.perf_counter(), cpu_s()
        times, info = analyse_timed(run_dir, tmp / "report", not args.no_plots)
        wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0
        peak, loadavg = peak_rss_gib(), load_average()
        print(f"records: {info['records']:,}, chunk gaps: {info['chunk_gaps']:,}")
        print(f"  {'phase':<66} {'wall s':>7} {'CPU s':>7}")
        for k, (w, c) in times.items():
            print(f"  {k:<66} {w:7.1f} {c:7.1f}")
        print(f"total end to end (excl. generation): {wall:.1f} s wall, {cpu:.1f} s CPU (goal < 60 s) -> "
              f"{'OK' if cpu < 60 else 'SLOW'} by CPU time, {'OK' if wall < 60 else 'SLOW'} by wall clock")
        print(f"peak RSS: {peak:.2f} GiB (goal < 4 GiB) -> {'OK' if peak < 4 else 'TOO BIG'}")
        print(f"machine load average: {loadavg} on {os.cpu_count()} cores (shared machine: wall >= CPU time)")
        row = next(r for r in info["summary"]["steps"] if r["step_index"] == len(STEPS) - 1 and r["task"] == "all")
        prec = row["itl_percentile_precision_share"] * 100
        print(f"last step, all tasks: TTFT p99 {row['ttft_p99_ms']:.2f} ms (exact), ITL p50 {row['itl_p50_ms']:.3f} ms "
              f"and p99 {row['itl_p99_ms']:.3f} ms (±{prec:.2f} %), inter-chunk p99 {row['inter_chunk_p99_ms']:.3f} ms "
              f"(±{prec:.2f} %), ITL samples {row['itl_count']:,}")
        wc = write_costs(run_dir)
        print(f"master write cost (JSON lines in, {wc['records']:,.0f} records in batches of 500): "
              f"JSONL {wc['jsonl_write_cpu_us_per_record']:.1f} us CPU/record, "
              f"Parquet {wc['parquet_write_cpu_us_per_record']:.1f} us CPU/record "
              f"(ratio {wc['parquet_write_cpu_us_per_record'] / wc['jsonl_write_cpu_us_per_record']:.1f}x)")
        print(f"disk per million records: JSONL {wc['jsonl_disk_bytes_per_record'] * 1e6 / 2**30:.2f} GiB, "
              f"Parquet {wc['store_disk_bytes_per_record'] * 1e6 / 2**30:.2f} GiB "
              f"(ratio {wc['jsonl_disk_bytes_per_record'] / wc['store_disk_bytes_per_record']:.1f}x smaller)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
