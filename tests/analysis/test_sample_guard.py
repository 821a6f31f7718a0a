"""The sample-size guard: one rule (n >= 10 / (1 - q)) for every table, plot point, knee, ratio,
interval and SLO check. A figure below its need is never a number; a column short in every row
is left out with a note; an unjudged SLO check says "not judged (n=..., needs ...)", not FAIL."""

import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import load_run
from tokenswarm.analysis.compare import compare_runs
from tokenswarm.analysis.curves import curves
from tokenswarm.analysis.render_compare import compare_doc
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.analysis.render_format import guarded
from tokenswarm.analysis.render_html import to_html
from tokenswarm.analysis.render_md import to_markdown
from tokenswarm.analysis.render_slo import slo_matrix_blocks
from tokenswarm.analysis.render_terminal import report_text
from tokenswarm.analysis.samples import guard_values, need_of, prune_short_columns
from tokenswarm.analysis.summary import analyse
from tokenswarm.cli import main


def test_a_percentile_cell_shows_n_below_what_it_needs_instead_of_a_number():
    row = {"ttft_count": 30, "ttft_p50_ms": 100.0, "ttft_p99_ms": 180.0, "ttft_p99_9_ms": 190.0}
    assert guarded(row, "ttft_p50_ms") == "100"
    assert guarded(row, "ttft_p99_ms") == "n<1000" and guarded(row, "ttft_p99_9_ms") == "n<10000"
    assert guarded({"ttft_count": 0, "ttft_p99_ms": None}, "ttft_p99_ms") == "—"  # not observed stays a dash


def test_e2e_percentiles_are_guarded_like_every_other_metric():
    # the metric name holds a digit: one request's E2E p50..p99.9 used to print as numbers
    one = {"e2e_count": 1, "e2e_p50_ms": 705.0, "e2e_p99_9_ms": 705.0, "e2e_from_schedule_count": 1,
           "e2e_from_schedule_p99_ms": 710.0}
    assert guarded(one, "e2e_p50_ms") == "n<20" and guarded(one, "e2e_p99_9_ms") == "n<10000"
    assert guarded(one, "e2e_from_schedule_p99_ms") == "n<1000"
    assert need_of("e2e_p95_ms") == 200 and need_of("request_output_tps_p50_tokens_per_s") == 20
    assert need_of("output_tokens_per_s") is None


def test_a_column_short_in_every_row_is_left_out_with_a_note_and_a_partly_judged_one_stays():
    headers = ["step", "p50", "p99", "p99.9"]
    rows = [["c1", "10", "n<1000", "n<10000"], ["c8", "12", "30", "n<10000"]]
    kept, body, note = prune_short_columns(headers, rows)
    assert kept == ["step", "p50", "p99"] and body == [["c1", "10", "n<1000"], ["c8", "12", "30"]]
    assert note is not None and "p99.9 (needs n >= 10000)" in note
    assert prune_short_columns(headers[:2], [r[:2] for r in rows]) == (headers[:2], [r[:2] for r in rows], None)


def _small_run(tmp_path, n=30, **kw):
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i * 0.2) for i in range(n)]
    return write_run(tmp_path / "run", recs, steps=[step(0, "concurrency", 1, T0, T0, T0 + 10)], **kw)


def test_the_report_of_a_small_run_prints_p50_and_leaves_the_p99_columns_out_with_a_note(tmp_path, capsys):
    run = _small_run(tmp_path)
    assert main(["report", str(run), "--no-plots", "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert "TTFT p50" in printed and "TTFT p99" not in printed.split("Left out")[0]
    assert "Left out, too few samples in every row: TTFT p99 (needs n >= 1000)" in printed
    md = (tmp_path / "o" / "report.md").read_text()
    assert "| p99.9 |" not in md and "p99.9 (needs n >= 10000)" in md
    e2e = md[md.index("### E2E latency"):]
    e2e = e2e[:e2e.index("###", 3)]
    assert "| p50 |" in e2e and "| p99 |" not in e2e  # 30 requests: E2E p99 is never a number


def _steps(points):
    """Step-table rows (all tasks) for the curves: (load, tokens/s, count, ttft p99)."""
    rows = []
    for i, (load, tps, n, p99) in enumerate(points):
        rows.append({"task": "all", "step_index": i, "step_name": f"c{load}", "step_kind": "concurrency",
                     "step_concurrency_users": load, "output_tokens_per_s": tps, "ttft_count": n, "ttft_p50_ms": 100.0,
                     "ttft_p99_ms": p99, "e2e_count": n, "e2e_p95_ms": 500.0, "tpot_count": n, "tpot_p99_ms": 20.0})
    return rows


def test_curve_points_and_the_knee_leave_out_percentiles_below_their_need():
    # TTFT p99 triples at c4 while throughput barely rises -- but only 200 requests per step
    few = curves(_steps([(1, 100.0, 200, 100.0), (2, 190.0, 200, 110.0), (4, 200.0, 200, 330.0)]), [])
    assert [p["ttft_p99_ms"] for p in few["points"]] == [None, None, None]
    assert {c["column"]: c["samples_needed_count"] for c in few["points"][0]["short_columns"]} == {
        "ttft_p99_ms": 1000, "tpot_p99_ms": 1000, "e2e_p99_ms": 1000}
    assert few["points"][0]["e2e_p95_ms"] == 500.0  # 200 support a p95
    assert next(k for k in few["knees"] if k["latency_metric"] == "ttft_p99_ms")["knee_step_name"] is None
    many = curves(_steps([(1, 100.0, 2000, 100.0), (2, 190.0, 2000, 110.0), (4, 200.0, 2000, 330.0)]), [])
    assert many["knee"]["knee_step_name"] == "c4" and many["knee"]["latency_metric"] == "ttft_p99_ms"


def test_guard_values_names_what_each_left_out_value_needed():
    values, short = guard_values({"ttft_count": 2, "ttft_p95_ms": 9.0, "output_tokens_per_s": 5.0},
                                 ["ttft_p95_ms", "output_tokens_per_s"])
    assert values == {"ttft_p95_ms": None, "output_tokens_per_s": 5.0} and short == {"ttft_p95_ms": 200}


def test_a_comparison_gives_no_ratio_and_no_interval_from_a_handful_of_requests(tmp_path):
    steps = [step(0, "concurrency", 1, T0, T0, T0 + 10)]
    base = write_run(tmp_path / "a", [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i) for i in range(5)],
                     steps=steps)
    fast = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i, chunk_offsets_ms=[50.0, 60.0, 70.0, 80.0])
            for i in range(5)]
    cand = write_run(tmp_path / "b", fast, steps=steps)
    s = compare_runs(load_run(base), load_run(cand), n_boot=100)
    row = s["rows"][0]
    assert row["speedup_insufficient"] and row["request_output_tps_p50_speedup_ratio"] is None
    assert row["request_output_tps_p50_speedup_ci_low_ratio"] is None and row["output_tokens_per_s_speedup_ratio"] is None
    assert row["ttft_p99_insufficient"] and row["ttft_p99_ratio"] is None and row["ttft_p99_needed_count"] == 1000
    s.update(baseline_health=None, candidate_health=None, resources=None)
    blocks = compare_doc(s, {})
    at = blocks.index(("h2", "Speedup and latency ratios per step and task"))
    table, note = blocks[at + 1], blocks[at + 2]
    assert table[1] == ["step", "task", "acc. length base -> cand"]  # every ratio column short: left out
    assert note[0] == "p" and "per-request tok/s (p50) (needs n >= 20)" in note[1] and "TTFT p99 (needs n >= 1000)" in note[1]


def test_unjudged_slo_checks_read_not_judged_with_n_and_need_in_html_markdown_and_terminal(tmp_path):
    run = load_run(_small_run(tmp_path, scenario={"slo": {"ttft_p95_ms": 100000, "ttft_p50_ms": 100000}}))
    s = analyse(run)
    p95 = next(r for r in s["slo_results"] if r["slo_name"] == "ttft_p95_ms" and r["task"] == "all")
    assert p95["not_enough_samples"] and p95["label"] == "not judged (n=30, needs 200)"
    assert p95["samples_count"] == 30 and p95["samples_needed_count"] == 200
    matrix = slo_matrix_blocks(s["slo_results"])[0]
    assert matrix[2][0][1] == "not judged (n=30, needs 200): ttft_p95_ms" and "FAIL" not in matrix[2][0][1]
    blocks = report_doc(s, {})
    html, md, text = to_html(blocks, {}, "t"), to_markdown(blocks, {}), report_text(s)
    for out in (html, md, text):
        assert "not judged (n=30, needs 200)" in out
        assert "FAIL" not in out
    assert "NOT JUDGED: 2 of 4 SLO checks rest on too few samples" in md
    assert "No step meets all SLOs (2 check(s) not judged: too few samples)." in md
    assert text.startswith("verdict: NOT JUDGED - 2 of 4 SLO checks pass, 0 miss, 2 not judged")


@pytest.mark.parametrize("limit,verdict", [(1, "FAIL: 2 of 4 SLO checks missed, 2 not judged"),
                                           (100000, "PASS: all 2 SLO checks met")])
def test_the_first_screen_leads_with_the_verdict_then_the_warnings(tmp_path, limit, verdict):
    slo = {"ttft_p50_ms": limit, "ttft_p95_ms": limit} if limit == 1 else {"ttft_p50_ms": limit}
    run = load_run(_small_run(tmp_path, scenario={"slo": slo}, warnings=["something worth acting on"]))
    s = analyse(run)
    blocks = report_doc(s, {})
    assert blocks[1] == ("h2", "Verdict") and blocks[2][0] == "banner" and blocks[2][2].startswith(verdict)
    headings = [b[1] for b in blocks if b[0] == "h2"]
    assert headings[:3] == ["Verdict", "Warnings", "Summary per load step (steady window, all tasks)"]
    text = report_text(s)
    assert text.index("verdict:") < text.index("something worth acting on") < text.index("out tok/s")
