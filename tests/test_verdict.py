"""The end-of-run verdict: SLOs are judged on the records read back; without SLOs the counts the
generator kept while writing the records answer "did any request succeed?"."""

from __future__ import annotations

import subprocess
import sys

from tests.analysis.runfactory import failed, record, write_run
from tokenswarm.orchestrate.verdict import EXIT_OK, EXIT_RUN_BROKE, EXIT_SLO_MISSED, evaluate_run, verdict_table


def test_without_slos_the_emitted_outcome_counts_decide_and_no_record_is_read(tmp_path):
    run = write_run(tmp_path / "run", [record(i) for i in range(3)])
    (run / "records.jsonl").write_bytes(b"not json\n")  # would break the run if it were read
    v = evaluate_run(run, {}, outcomes={"ok": 3})
    assert v["exit_status"] == EXIT_OK and v["reason"] == "no SLOs given; the run worked"


def test_without_slos_and_no_success_the_run_broke_with_its_outcome_counts(tmp_path):
    run = write_run(tmp_path / "run", [failed(0), failed(1, outcome="http_error")])
    v = evaluate_run(run, {}, outcomes={"timeout": 1, "http_error": 1, "ok": 0})
    assert v["exit_status"] == EXIT_RUN_BROKE
    assert v["reason"] == (f"no successful request: {run}: no successful request among 2 records "
                           "(outcomes: {'http_error': 1, 'timeout': 1})")


def test_without_counts_the_records_are_read(tmp_path):
    run = write_run(tmp_path / "run", [failed(0), failed(1)])
    v = evaluate_run(run, {})
    assert v["exit_status"] == EXIT_RUN_BROKE and "no successful request among 2 records" in v["reason"]


def test_slos_are_judged_on_the_records_whatever_the_counts_say(tmp_path):
    run = write_run(tmp_path / "run", [record(i, ttft_ms=900.0) for i in range(40)])
    v = evaluate_run(run, {"ttft_p50_ms": 100}, outcomes={"ok": 40})
    assert v["exit_status"] == EXIT_SLO_MISSED
    assert v["checks"] and all(c["observed_value"] == 900.0 and not c["passed"] for c in v["checks"])


def test_a_check_its_samples_cannot_support_is_not_judged_not_missed_and_still_fails_the_gate(tmp_path):
    run = write_run(tmp_path / "run", [record(i, ttft_ms=90.0) for i in range(40)])
    v = evaluate_run(run, {"ttft_p50_ms": 100, "ttft_p95_ms": 100}, outcomes={"ok": 40})
    # rows "all" and "qa": the p50s pass, the p95s rest on 40 of the 200 requests they need
    assert v["exit_status"] == EXIT_SLO_MISSED and v["reason"] == "2 of 4 not judged: not enough samples"
    table = verdict_table(v)
    assert "NOT ENOUGH SAMPLES: not judged (n=40, needs 200)" in table and "MISSED" not in table
    assert "verdict: FAIL (SLO not judged: too few samples)" in table
    missed = evaluate_run(run, {"ttft_p50_ms": 10, "ttft_p95_ms": 100}, outcomes={"ok": 40})
    assert missed["reason"].startswith("2 of 4 SLO checks missed, 2 of 4 not judged")
    assert "verdict: FAIL (SLO missed)" in verdict_table(missed)


def test_a_jsonl_run_and_its_no_slo_verdict_import_neither_pyarrow_nor_numpy_nor_the_analysis(tmp_path):
    # pyarrow ~0.2 s, numpy ~0.16 s (the C extension does the per-record numbers) and the analysis
    # ~0.1 s of CPU per generator process, paid for nothing.
    run = write_run(tmp_path / "run", [record(i) for i in range(3)])
    code = ("import sys, locust, tokenswarm.locustfile\n"
            "from tokenswarm.orchestrate.verdict import evaluate_run\n"
            f"assert evaluate_run({str(run)!r}, {{}}, outcomes={{'ok': 3}})['passed']\n"
            "from tokenswarm.wire.native import ENABLED\n"
            "heavy = ('pyarrow', 'prometheus_client', 'tokenswarm.analysis', 'jsonschema', 'jsonschema_rs') + (('numpy',) if ENABLED else ())\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_records_lost_fail_the_run_even_when_every_written_request_succeeded(tmp_path):
    run = write_run(tmp_path / "run", [record(i) for i in range(3)],
                    totals={"requests_started": 4, "records_received": 3, "records_lost": 1,
                            "records_missing_seqs": 1, "in_flight_lost": 0})
    v = evaluate_run(run, {}, outcomes={"ok": 3})
    assert v["exit_status"] == EXIT_RUN_BROKE
    assert v["reason"] == "1 record(s) lost (the manifest's warnings name them)"


def test_an_interrupted_run_prints_and_writes_the_status_it_exits_with_never_pass(tmp_path, capsys):
    import json

    from tokenswarm.orchestrate.verdict import EXIT_INTERRUPTED, conclude

    run = write_run(tmp_path / "run", [record(i) for i in range(3)])
    v, code = conclude(run, {}, outcomes={"ok": 3}, interrupted="locust_quit")
    printed = capsys.readouterr().out
    assert code == v["exit_status"] == EXIT_INTERRUPTED and not v["passed"]
    assert v["reason"] == ("the run was interrupted (locust_quit) before its plan ended; "
                           "the SLOs alone: no SLOs given; the run worked")
    assert "verdict: INTERRUPTED - the run was interrupted (locust_quit)" in printed
    assert "(exit status 130)" in printed and "PASS" not in printed
    assert json.loads((run / "slo.json").read_text())["exit_status"] == EXIT_INTERRUPTED
    assert '<failure message="the run was interrupted' in (run / "junit.xml").read_text()


def test_a_run_the_circuit_breaker_stopped_prints_run_broke_with_the_breakers_message(tmp_path, capsys):
    from tokenswarm.orchestrate.verdict import conclude

    run = write_run(tmp_path / "run", [record(i) for i in range(3)])
    breaker = "circuit breaker: 20 identical failures before any success (HTTP 401)"
    v, code = conclude(run, {}, outcomes={"ok": 3}, broken=breaker)
    assert code == v["exit_status"] == EXIT_RUN_BROKE and v["reason"].startswith(breaker + "; the SLOs alone: ")
    assert f"verdict: FAIL (run broke) - {breaker}" in capsys.readouterr().out
