"""The analysis of a Parquet store: the same tables as the exact JSONL path, chunk percentiles
within the histogram's stated precision, and a store cut short by a killed writer."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.analysis.runfactory import T0, failed, manifest, record, step, write_run
from tests.helpers import reference as ref
from tokenswarm.analysis import RunInputError, analyse, load_run
from tokenswarm.analysis.chunkhist import PRECISION_SHARE, _positions
from tokenswarm.analysis.stats import PERCENTILE_KEYS, PERCENTILES
from tokenswarm.buckets import bucket_value_ms
from tokenswarm.collect.parquet_store import ParquetRecordsWriter
from tokenswarm.load.livestats import bucket_keys
from tokenswarm.names import TTFT
from tokenswarm.record import RequestRecord


def _records(n: int = 3000, seed: int = 1) -> list[dict]:
    """Two steps with warm-up, three tasks, 1..4 tokens per chunk, some zero-token and
    token-less streams, and failures."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        st = 0 if i < n // 2 else 1
        sent = T0 + st * 100 + (i % (n // 2)) * 90 / (n // 2)
        phase = "warmup" if (i % (n // 2)) < n // 20 else "steady"
        task = ("qa", "code", "chat")[int(rng.integers(0, 3))]
        if rng.random() < 0.03:
            out.append(failed(i, step=st, phase=phase, task=task, sent_at_s=sent))
            continue
        k = int(rng.integers(2, 60))
        gaps = rng.gamma(2.0, 4.0 + 3 * st, k - 1) * (rng.random(k - 1) > 0.02)  # a few glued chunks (0 ms)
        offs = np.round(50 + rng.gamma(3, 20) + np.concatenate([[0.0], np.cumsum(gaps)]), 3).tolist()
        toks = rng.integers(0 if i % 7 == 0 else 1, 5, k).tolist()
        if i % 11 == 0:
            toks = None  # no per-chunk counts: per-chunk ITL samples
        out.append(record(i, step=st, phase=phase, task=task, sent_at_s=sent, chunk_offsets_ms=offs,
                          chunk_tokens=toks, output_tokens=sum(toks) if toks else k))
    return out


def _steps():
    return [step(0, "concurrency", 4, T0, T0 + 4.5, T0 + 95), step(1, "concurrency", 8, T0 + 100, T0 + 104.5, T0 + 195)]


def _both(tmp_path, records, row_group_records=700):
    exact = write_run(tmp_path / "jsonl", records, steps=_steps())
    store = tmp_path / "parquet"
    store.mkdir()
    (store / "manifest.json").write_bytes(orjson.dumps(manifest(steps=_steps())))
    w = ParquetRecordsWriter(store, row_group_records=row_group_records)
    for r in records:
        w.write_lines(RequestRecord(**r).to_json() + b"\n", 1)
    w.close()
    return exact, store


def _row_samples(records: list[dict], step_index: int, task: str, metric: str) -> list[float]:
    """The raw samples behind one summary row (steady, successful), by the glossary's formulas."""
    out: list[float] = []
    for r in records:
        if (r["step"] != step_index or r["phase"] != "steady" or r["outcome"] != "ok"
                or task not in ("all", r["task"])):
            continue
        if metric == "itl":
            out += ref.itl_ms(r["chunk_offsets_ms"], r["chunk_tokens"])
        else:
            out += ref.inter_chunk_ms(r["chunk_offsets_ms"])
    return out


def _assert_within_precision_of_the_sample_at_rank(got: float, samples: list[float], p: float, where: object) -> None:
    """docs/record-store.md: each histogram percentile is within PRECISION_SHARE (0.5 %) of the
    sample at its rank, one of the two samples numpy's linear percentile interpolates between
    (or 0 where that sample is below 1 us). 1e-6 relative slack covers the float32 storage."""
    low, high = ref.linear_rank_neighbours(samples, p)
    share = PRECISION_SHARE * (1 + 1e-6)
    near = [s for s in (low, high) if abs(got - s) <= share * s or (got == 0.0 and s < 1e-3)]
    assert near, (f"{where}: p{p} = {got} ms is not within {PRECISION_SHARE:.1%} of either sample at the "
                  f"rank ({low} ms, {high} ms)")


def test_the_store_gives_the_same_tables_as_jsonl_and_chunk_percentiles_within_the_stated_precision(tmp_path):
    records = _records()
    exact_dir, store_dir = _both(tmp_path, records)
    exact_run, store_run = load_run(exact_dir), load_run(store_dir)
    assert len(store_run.files) > 1 and store_run.chunk_hists is not None
    a, b = analyse(exact_run), analyse(store_run)
    assert len(a["steps"]) == len(b["steps"]) == 2 * 4
    chunk_pct = {f"{m}_{k}_ms" for m in ("itl", "inter_chunk") for k in PERCENTILE_KEYS}
    for ra, rb in zip(a["steps"], b["steps"]):
        for key, va in ra.items():
            vb = rb[key]
            if key in chunk_pct or key.endswith("_percentile_precision_share"):
                continue
            if key.startswith("itl_mean"):  # exact up to the float32 rounding of gap / tokens
                assert vb == pytest.approx(va, rel=1e-6), key
                continue
            if isinstance(va, float):
                assert vb == pytest.approx(va, rel=1e-9, abs=1e-12), key
            else:
                assert vb == va, key
        assert rb["itl_percentile_precision_share"] == PRECISION_SHARE and ra["itl_percentile_precision_share"] == 0
    # Against the raw samples of every row: each histogram percentile is within the documented
    # 0.5 % of one of the two samples at the exact percentile's rank.
    for r_store in b["steps"]:
        for m in ("itl", "inter_chunk"):
            samples = _row_samples(records, r_store["step_index"], r_store["task"], m)
            assert r_store[f"{m}_count"] == len(samples)
            for p, k in zip(PERCENTILES, PERCENTILE_KEYS):
                _assert_within_precision_of_the_sample_at_rank(
                    r_store[f"{m}_{k}_ms"], samples, p, (r_store["step_index"], r_store["task"], m))
    assert a["spec_decode"] == b["spec_decode"]
    assert a["soak"] == b["soak"]


def test_histogram_percentiles_are_within_half_a_percent_of_the_sample_at_their_rank(tmp_path):
    recs = _records(4000, seed=3)
    exact_dir, store_dir = _both(tmp_path, recs)
    b = analyse(load_run(store_dir))
    row = next(r for r in b["steps"] if r["step_index"] == 1 and r["task"] == "code")
    samples = _row_samples(recs, 1, "code", "itl")
    assert row["itl_count"] == len(samples)
    assert row["itl_mean_ms"] == pytest.approx(float(np.mean(samples)), rel=1e-6)
    assert (row["itl_min_ms"], row["itl_max_ms"]) == pytest.approx((min(samples), max(samples)), rel=1e-6)
    for p, k in zip(PERCENTILES, PERCENTILE_KEYS):
        _assert_within_precision_of_the_sample_at_rank(row[f"itl_{k}_ms"], samples, p, "step 1, code")


def test_a_store_cut_by_a_killed_writer_is_analysed_from_its_finished_parts(tmp_path):
    recs = _records(1200)
    _, store_dir = _both(tmp_path, recs, row_group_records=500)
    (store_dir / "records-000003.parquet").rename(store_dir / "records-000003.parquet.tmp")  # unfinished part
    run = load_run(store_dir)
    assert len(run) == 1000
    assert any("records-000003.parquet.tmp" in w and "unfinished" in w for w in run.warnings)
    summary = analyse(run)
    assert summary["run"]["records_count"] == 1000


def test_request_keys_are_read_on_first_use(tmp_path):
    recs = _records(300)
    exact_dir, store_dir = _both(tmp_path, recs, row_group_records=100)
    a, b = load_run(exact_dir), load_run(store_dir)
    assert "request_key" not in b.columns
    np.testing.assert_array_equal(a["request_key"], b["request_key"])
    np.testing.assert_array_equal(a["output_sha256"], b["output_sha256"])


def test_the_fast_bucket_positions_are_the_live_histograms_buckets_within_the_precision():
    rng = np.random.default_rng(5)
    v = np.concatenate([rng.lognormal(1.0, 3.0, 200_000), [0.0, 1e-4, 9.99e-4, 1e-3, 1.0, 250.0]]).astype(np.float32)
    pos = _positions(v)
    same = (pos - 1) == bucket_keys(v)
    assert same.mean() > 0.9999  # float32 rounding may move a value sitting on an edge by one bucket
    mid = np.array([bucket_value_ms(int(k)) for k in pos - 1])
    tiny = v < 1e-3
    assert (mid[tiny] == 0).all()
    assert (np.abs(mid[~tiny] / v[~tiny] - 1) <= PRECISION_SHARE).all()


def test_the_report_prints_the_precision_next_to_histogram_percentiles_only(tmp_path):
    from tokenswarm.analysis.report import write_report

    exact_dir, store_dir = _both(tmp_path, _records(600), row_group_records=200)
    for run_dir, expected in ((store_dir, True), (exact_dir, False)):
        run = load_run(run_dir)
        write_report(run, analyse(run), tmp_path / f"report-{run_dir.name}", with_plots=False)
        md = (tmp_path / f"report-{run_dir.name}" / "report.md").read_text()
        assert ("p99 (±0.5 %)" in md) is expected


def test_two_store_runs_compare_like_their_jsonl_copies(tmp_path):
    from tokenswarm.analysis.summary import compare_summary

    base_jsonl, base_store = _both(tmp_path / "a", _records(800, seed=1), row_group_records=300)
    cand_jsonl, cand_store = _both(tmp_path / "b", _records(800, seed=2), row_group_records=300)
    exact = compare_summary(load_run(base_jsonl), load_run(cand_jsonl), n_boot=50)
    store = compare_summary(load_run(base_store), load_run(cand_store), n_boot=50)
    assert exact["consistency"] == store["consistency"]
    for ra, rb in zip(exact["rows"], store["rows"]):
        assert ra["ttft_p50_ratio"] == pytest.approx(rb["ttft_p50_ratio"], rel=1e-12)
        assert ra["request_output_tps_p50_speedup_ratio"] == pytest.approx(rb["request_output_tps_p50_speedup_ratio"], rel=1e-12)


def test_the_c_pass_counts_exactly_what_the_numpy_pass_counts(tmp_path):
    import pyarrow.parquet as pq

    from tokenswarm.analysis import chunkhist
    from tokenswarm.analysis.loader.columnar import _chunk_columns

    if chunkhist._kernel is None:
        pytest.skip("tokenswarm.analysis._chunkhist not built (no C compiler): the numpy path is the only one")
    _, store_dir = _both(tmp_path, _records(2000, seed=4), row_group_records=700)
    accs = [chunkhist.ChunkAccumulator(use_kernel=k) for k in (True, False)]
    for part in sorted(store_dir.glob("records-*.parquet")):
        t = pq.read_table(part).combine_chunks()
        ch = _chunk_columns(t.column("chunk_offsets_ms").chunk(0), t.column("chunk_tokens").chunk(0))
        outcome = t.column("outcome").to_numpy(zero_copy_only=False)
        step = t.column("step").to_numpy(zero_copy_only=False).astype(np.int32)
        phase = (t.column("phase").to_numpy(zero_copy_only=False) == "steady").astype(np.int32)
        task = np.unique(t.column("task").to_numpy(zero_copy_only=False), return_inverse=True)[1].astype(np.int32)
        for acc in accs:
            acc.add(outcome == "ok", step, phase, task, ch["flat"], ch["n"], ch["tok"], ch["exact"])
    c, p = (a.finish() for a in accs)
    assert c.keys == p.keys and c.cube.sum() > 10_000
    moved = np.abs(c.cube - p.cube).sum() / c.cube.sum()
    assert moved < 1e-4  # libm and numpy's float32 log may put a value on a bucket edge one bucket apart
    np.testing.assert_array_equal(c.cube.sum(axis=2), p.cube.sum(axis=2))
    np.testing.assert_array_equal(c.unknown.sum(axis=1), p.unknown.sum(axis=1))
    np.testing.assert_array_equal(c.gaps, p.gaps)
    # the per-delivery ITL counts of the same pass: deliveries by (group, tokens) exactly, buckets as above
    width = max(c.itl_cube.shape[1], p.itl_cube.shape[1])
    c_itl, p_itl = (np.pad(h.itl_cube, ((0, 0), (0, width - h.itl_cube.shape[1]), (0, 0))) for h in (c, p))
    assert c_itl.sum() > 10_000 and np.abs(c_itl - p_itl).sum() / c_itl.sum() < 1e-4
    np.testing.assert_array_equal(c_itl.sum(axis=2), p_itl.sum(axis=2))
    for name in ("gap_sum", "itl_sum", "gap_lo", "gap_hi", "itl_lo", "itl_hi"):
        np.testing.assert_allclose(getattr(c, name), getattr(p, name), rtol=1e-9, err_msg=name)


def test_per_request_percentiles_at_soak_scale_equal_numpys_on_the_raw_values():
    from tokenswarm.analysis.stats import describe

    rng = np.random.default_rng(9)
    v = rng.lognormal(4.0, 1.0, 300_000)
    out = describe(v, TTFT, n_failed=600)
    for p, k in zip((50, 90, 95, 99, 99.9), PERCENTILE_KEYS):
        assert out[f"ttft_{k}_ms"] == np.percentile(v, p)
        with np.errstate(invalid="ignore"):  # numpy interpolates finite and infinite values to NaN
            with_inf = np.percentile(np.concatenate([v, np.full(600, np.inf)]), p)
        assert out[f"ttft_{k}_failed_as_inf_ms"] == (None if not np.isfinite(with_inf) else with_inf)
    assert (out["ttft_min_ms"], out["ttft_max_ms"]) == (v.min(), v.max())
    assert out["ttft_mean_ms"] == pytest.approx(v.mean(), rel=1e-12)


def test_a_store_with_an_implausible_token_count_is_refused_naming_the_part_and_row(tmp_path):
    recs = _records(300)
    recs[123]["output_tokens"] = -4
    _, store_dir = _both(tmp_path, recs, row_group_records=100)
    with pytest.raises(RunInputError, match=r"records-\d+\.parquet: row group \d+, row 23: field 'output_tokens' "
                                            r"is -4, not a plausible token count"):
        load_run(store_dir)
