"""SLO parsing and the public evaluator (reused by CI)."""

import pytest

from tests.analysis.runfactory import T0, failed, record, step, write_run
from tokenswarm.analysis import load_run, step_table
from tokenswarm.analysis.slo import SloSpec, parse_slos
from tokenswarm.analysis.tables import evaluate


def test_parse_validates_names_and_values_with_dotted_paths():
    spec = parse_slos({"ttft_p95_ms": 800, "per_task": {"code": {"ttft_p95_ms": 1000}}})
    assert spec.for_task("code")["ttft_p95_ms"] == 1000 and spec.for_task("qa")["ttft_p95_ms"] == 800
    assert spec.for_task("all") == {"ttft_p95_ms": 800}
    with pytest.raises(ValueError, match=r"slo.ttft_p97_ms: unknown SLO name"):
        parse_slos({"ttft_p97_ms": 1})
    with pytest.raises(ValueError, match=r"slo.per_task.code.error_rate: expected a number"):
        parse_slos({"per_task": {"code": {"error_rate": "low"}}})


def test_request_thresholds_are_explicit_or_the_loosest_percentile_slo():
    spec = parse_slos({"ttft_p50_ms": 300, "ttft_p99_ms": 900, "tpot_ms": 40, "e2e_p95_ms": 5000})
    assert spec.request_thresholds("qa") == {"ttft_ms": 900, "tpot_ms": 40, "e2e_ms": 5000}
    assert SloSpec().request_thresholds("qa") == {}


@pytest.fixture()
def two_step_run(tmp_path):
    steps = [step(0, "concurrency", 1, T0, T0, T0 + 10), step(1, "concurrency", 4, T0 + 10, T0 + 10, T0 + 20)]
    recs = [record(i, step=0, phase="steady", task=("qa", "code")[i % 2], sent_at_s=T0 + i * 0.5,
                   chunk_offsets_ms=[100.0, 120.0]) for i in range(20)]
    recs += [record(100 + i, step=1, phase="steady", task=("qa", "code")[i % 2], sent_at_s=T0 + 10 + i * 0.5,
                    chunk_offsets_ms=[600.0 + 10 * i, 700.0 + 10 * i]) for i in range(20)]
    recs += [failed(200, step=1, phase="steady", sent_at_s=T0 + 15)]
    return load_run(write_run(tmp_path / "run", recs, steps=steps))


def test_evaluate_checks_every_row_and_applies_task_overrides(two_step_run):
    slos = {"ttft_p50_ms": 500, "error_rate": 0.01, "per_task": {"code": {"ttft_p50_ms": 2000}}}
    results = evaluate(two_step_run, slos)
    by = {(r.step_index, r.task, r.name): r for r in results}
    assert by[(0, "all", "ttft_p50_ms")].passed and by[(0, "all", "ttft_p50_ms")].observed == 100.0
    assert not by[(1, "all", "ttft_p50_ms")].passed
    # per task there are 10 requests per step: a median needs 20, so it is not judged
    code = by[(1, "code", "ttft_p50_ms")]
    assert not code.passed and code.not_enough_samples and code.threshold == 2000 and code.observed is None
    assert "not enough samples" in code.detail and "n=10" in code.detail
    assert not by[(1, "all", "error_rate")].passed and by[(1, "all", "error_rate")].observed == pytest.approx(1 / 21)
    assert len(results) == 2 * 3 * 2  # 2 steps x (all, qa, code) x 2 SLOs


def test_evaluate_accepts_tables_or_rows_with_the_same_result(two_step_run):
    slos = {"min_output_tps": 3.0, "min_goodput_share": 0.96, "ttft_p99_ms": 1000}
    a = evaluate(two_step_run, slos)
    tables = step_table(two_step_run, slo=slos)
    assert evaluate(tables, slos) == a == evaluate(tables.rows, slos)
    failing = {(r.step_index, r.task) for r in a if not r.passed and r.name == "min_goodput_share"}
    # step 1: every TTFT (600..790) is within 1000 ms, but one qa request failed: 20/21 < 0.96
    assert failing == {(1, "all"), (1, "qa")}


def test_unobserved_metric_fails_with_a_reason(tmp_path):
    recs = [record(0, chunk_offsets_ms=[100.0], chunk_tokens=[1], output_tokens=1)]  # 1 token: no TPOT
    res = evaluate(load_run(write_run(tmp_path / "run", recs)), {"tpot_p99_ms": 50})
    assert not res[0].passed and res[0].observed is None and "not observed" in res[0].detail


def test_a_percentile_slo_over_too_few_samples_says_not_enough_samples_instead_of_passing(tmp_path):
    recs = [record(i, chunk_offsets_ms=[100.0, 120.0]) for i in range(199)]
    res = evaluate(load_run(write_run(tmp_path / "run", recs)), {"ttft_p95_ms": 1000, "ttft_p50_ms": 1000})
    by = {r.name: r for r in res}
    assert by["ttft_p50_ms"].passed and not by["ttft_p50_ms"].not_enough_samples
    p95 = by["ttft_p95_ms"]
    assert not p95.passed and p95.not_enough_samples and p95.observed is None
    assert p95.to_dict()["not_enough_samples"] and "a p95 needs n >= 200" in p95.detail
    recs.append(record(199, chunk_offsets_ms=[100.0, 120.0]))
    res = evaluate(load_run(write_run(tmp_path / "run200", recs)), {"ttft_p95_ms": 1000})
    assert res[0].passed and res[0].observed == 100.0
