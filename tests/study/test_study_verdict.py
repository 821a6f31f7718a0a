"""The study verdict carries what the method asks for: no figure below its need, suspect cells
where the generator was overloaded, the resource cost beside the speedup, latency regressions and
goodput with their basis, the observability audit per arm -- on synthetic study directories."""

from __future__ import annotations

import orjson
import pytest

from tests.analysis.runfactory import T0
from tests.study.studyfactory import write_study
from tokenswarm.analysis.study import analyse_study, write_study_report
from tokenswarm.analysis.study_rounds import SUSPECT
from tokenswarm.analysis.verdict_table import verdict_table

N_BOOT = 200


def cell(summary, task, load):
    return next(r for r in summary["verdict"] if r["task"] == task and r["load"] == load)


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory):
    """Two rounds; the draft arm's second round had a 250 ms event-loop stall inside c8's window."""
    root = write_study(tmp_path_factory.mktemp("overloaded"), overloaded=("draft", 2))
    files, text = write_study_report(root, n_boot=N_BOOT)
    return orjson.loads(files["summary.json"].read_bytes()), text, files["report.md"].read_text()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    root = write_study(tmp_path_factory.mktemp("healthy"))
    files, text = write_study_report(root, n_boot=N_BOOT)
    return orjson.loads(files["summary.json"].read_bytes()), text, files["report.md"].read_text()


def test_cells_fed_by_an_overloaded_generator_are_suspect_and_never_read_faster_reproducible(overloaded):
    summary, text, md = overloaded
    for task in ("all", "qa", "code", "math"):
        c8 = cell(summary, task, 8.0)
        assert c8["suspect"] and c8["verdict"] == SUSPECT and c8["suspect_runs"] == ["draft round 2"]
        assert not cell(summary, task, 1.0)["suspect"], "the stall was in c8's window only"
    assert cell(summary, "code", 8.0)["verdict_if_trusted"] == "faster, reproducible"  # kept, not shown as the verdict
    assert cell(summary, "code", 1.0)["verdict"] == "faster, reproducible"
    for line in text.splitlines() + md.splitlines():
        if " c8 " in f" {line} ".replace("|", " "):
            assert "faster, reproducible" not in line, line
    assert "SUSPECT: generator overloaded (draft round 2)" in md
    assert any("GENERATOR OVERLOADED in draft round 2 (step(s) c8)" in n and "250 ms" in n for n in summary["notes"])
    health = {(h["arm"], h["round"]): h for h in summary["generator_health"]}
    assert health[("draft", 2)]["overloaded"] and health[("draft", 2)]["overloaded_steps"] == ["c8"]
    assert not health[("base", 1)]["overloaded"]


def test_a_stall_outside_every_steady_window_leaves_the_cells_judged(tmp_path):
    root = write_study(tmp_path, rounds=1, overloaded=("draft", 1), stall=(T0 + 1.0, T0 + 4.0))  # in warm-up
    summary = analyse_study(root, n_boot=N_BOOT)
    assert not any(r["suspect"] for r in summary["verdict"])
    assert cell(summary, "code", 8.0)["verdict"] == "faster (one round: reproducibility not tested)"


def test_each_cell_carries_gpu_memory_power_and_tokens_per_joule_of_both_arms_and_the_sentence(healthy):
    summary, text, md = healthy
    row = cell(summary, "all", 1.0)
    assert row["baseline_gpu_memory_used_mib_max"] == pytest.approx(40000.0)
    assert row["candidate_gpu_memory_used_mib_max"] == pytest.approx(43174.4)
    assert row["gpu_memory_used_mib_delta"] == pytest.approx(3174.4)
    assert row["baseline_gpu_power_w_mean"] == pytest.approx(300.0) and row["gpu_power_change_share"] == pytest.approx(0.18)
    # same tokens in the window, 18 % more power: 1 / 1.18 the tokens per joule
    assert row["output_tokens_per_joule_ratio"] == pytest.approx(1 / 1.18, rel=1e-3)
    sentence = "1.00x tokens/s for +3.1 GiB and +18 % power -> 0.85x tokens per joule"
    assert row["resource_summary_text"] == sentence
    assert cell(summary, "qa", 1.0)["candidate_gpu_power_w_mean"] == pytest.approx(354.0)  # the step's GPU
    assert sentence in text and "### Resource cost: draft vs base" in md and "39.1 / 42.2" in md


def test_without_a_gpu_exporter_the_cost_column_is_left_out_and_the_note_says_why(tmp_path):
    summary = analyse_study(write_study(tmp_path, rounds=1, gpu=False), n_boot=N_BOOT)
    assert not cell(summary, "all", 1.0)["resources_observed"]
    headers, _rows, notes = verdict_table(summary, "draft")
    assert "GPU cost" not in headers and any("no GPU exporter" in n for n in notes)


def test_a_ttft_regression_whose_interval_excludes_one_is_flagged_beside_the_speedup(healthy, tmp_path):
    summary, text, _md = healthy
    qa8 = cell(summary, "qa", 8.0)
    assert qa8["speedup"] > 1.0 and qa8["ttft_p50_ratio"] == pytest.approx(3.5, rel=0.02)
    assert qa8["latency_regressions"] and qa8["latency_regressions"][0].startswith("TTFT p50 x3.50 [")
    assert any(n.startswith("arm draft, qa at concurrency 8: latency regression") for n in summary["notes"])
    assert "TTFT p50 x3.50" in text
    assert cell(summary, "code", 8.0)["latency_regressions"] == []
    even = analyse_study(write_study(tmp_path, rounds=1, ttft_qa_c8_ms=100.0), n_boot=N_BOOT)
    assert not any("latency regression" in n for n in even["notes"])


def test_goodput_shows_its_threshold_n_and_interval_or_is_left_out(healthy, tmp_path):
    summary, text, _md = healthy
    row = cell(summary, "qa", 1.0)
    assert row["goodput_thresholds"] == {"ttft_ms": 1000.0, "tpot_ms": 100.0}
    assert row["goodput_baseline_good_requests_count"] == [40, 40] and row["goodput_ratio_ci"] is not None
    assert "(n 40/40)" in text and "tpot_ms <= 100, ttft_ms <= 1000" in text
    rare = cell(summary, "math", 1.0)  # 5 good requests per run
    assert rare["goodput_insufficient"] and rare["goodput_ratio"] is None and rare["goodput_ratio_ci"] is None
    bare = analyse_study(write_study(tmp_path, rounds=1, slo={}), n_boot=N_BOOT)
    assert cell(bare, "qa", 1.0)["goodput_ratio"] is None
    headers, _rows, notes = verdict_table(bare, "draft")
    assert "goodput" not in headers and any("no per-request SLO thresholds" in n for n in notes)


def test_a_cell_below_its_need_has_no_ratio_and_no_interval_anywhere(healthy):
    summary, text, md = healthy
    rare = cell(summary, "math", 8.0)
    assert rare["verdict"] == "not enough samples" and rare["speedup_insufficient"]
    assert rare["output_tokens_per_joule_ratio"] is None and rare["gpu_memory_used_mib_delta"] is not None
    assert any(n.startswith("arm draft: 2 cell(s) with too few requests") and "math c1 (5/5)" in n
               for n in summary["notes"])
    assert rare["speedup"] is None and rare["speedup_ci"] is None and rare["aggregate_speedup_ci"] is None
    math_rows = [ln for ln in md.splitlines() if ln.startswith("| math |")]
    assert math_rows and all("[" not in ln and "n<20" in ln for ln in math_rows)
    # E2E p99 needs 1,000 requests in every row: the column is left out, the note says so
    headers, _rows, notes = verdict_table(summary, "draft")
    assert "E2E p99" not in headers and "TTFT p50" in headers
    assert any("E2E p99 (needs n >= 1000)" in n for n in notes)


def test_acceptance_rows_only_for_arms_that_speculate_and_the_header_names_the_arms(healthy):
    summary, text, md = healthy
    assert {a["arm"] for a in summary["acceptance"]} == {"draft"}
    assert "## draft vs base" in md and "draft vs base (ratios candidate/baseline" in text
    assert "ok requests base/cand" in text and "ok requests: successful requests in the step's steady window" in text


def test_the_observability_audit_of_each_arm_is_in_the_study_report(healthy):
    summary, text, md = healthy
    assert [o["arm"] for o in summary["observability"]] == ["base", "draft"]
    signals = {s["signal"]: s for s in summary["observability"][0]["signals"]}
    assert "queue_wait" in signals and signals["queue_wait"]["exposed"] is False
    assert "## Observability audit per arm" in md and "| queue wait | MISSING | MISSING |" in md
    # the baseline never speculated: its speculative signals are not applicable, not missing
    assert signals["acceptance_rate"]["exposed"] is None
    assert "| acceptance rate | n/a (no speculation) | MISSING |" in md
    assert "observability of base: 0/6 signals exposed" in text and "6 speculative signal(s) not applicable" in text
    assert "observability of draft: 0/12 signals exposed" in text
