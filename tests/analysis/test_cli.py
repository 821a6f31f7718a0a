"""``tokenswarm report`` / ``compare``: outputs, exit codes, self-contained HTML, units in keys."""

import re

import orjson
import pytest

from tests.analysis.runfactory import T0, failed, key, record, step, write_run
from tokenswarm.analysis.summary import unitless_keys
from tokenswarm.cli import main

STEPS = [step(0, "concurrency", 1, T0, T0 + 1, T0 + 30), step(1, "concurrency", 4, T0 + 30, T0 + 31, T0 + 60)]


def _run(path, text="same output", n=80, run_keys_offset=0, **kw):
    recs = []
    for i in range(n):
        s = i * 2 // n
        recs.append(record(i, request_key=key(i + run_keys_offset), step=s, phase="steady", sent_at_s=T0 + 2 + 30 * s + (i % (n // 2)) * 0.5,
                           task=("qa", "code")[i % 2], output_text=text,
                           chunk_offsets_ms=[80.0 + s * 40 + j * 15 for j in range(12)], chunk_tokens=[1] + [2] * 11))
    recs.append(failed(900, step=1, phase="steady", sent_at_s=T0 + 40))
    return write_run(path, recs, steps=STEPS, **kw)


def test_report_writes_every_artefact_and_a_short_table(tmp_path, capsys):
    run = _run(tmp_path / "run", scenario={"slo": {"ttft_p50_ms": 100}, "cost": {"gpu_hour_usd": 2.0, "gpus": 2}})
    assert main(["report", str(run)]) == 0
    out = run / "report"
    for name in ("report.html", "report.md", "summary.json", "steps.csv", "errors.csv", "slo_results.csv", "cost.csv"):
        assert (out / name).is_file(), name
    printed = capsys.readouterr().out
    assert "TTFT p99" in printed and "highest load meeting SLOs: 1" in printed
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert unitless_keys(summary) == []
    cost = summary["cost"][0]
    assert cost["cost_per_1m_output_tokens_usd"] == pytest.approx(4.0 / (summary["steps"][0]["output_tokens_per_s"] * 3600) * 1e6)
    html = (out / "report.html").read_text()
    # self-contained: no external src/href, plots inline
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "data:image/png;base64," in html
    assert "<script src" not in html and "<link" not in html


def test_report_flags_an_overloaded_generator_at_the_top(tmp_path):
    run = _run(tmp_path / "run", generator_health={"cpu_warning": True, "max_loop_lag_ms": 250, "late_dispatches": 7})
    assert main(["report", str(run), "--no-plots", "--quiet", "--out", str(tmp_path / "o")]) == 0
    html = (tmp_path / "o" / "report.html").read_text()
    body = html[html.index("<body>"):]
    # no gate: the step table leads, the warnings follow it, before any detail
    assert body.index("Summary per load step") < body.index("GENERATOR OVERLOADED") < body.index("Load curves")
    md = (tmp_path / "o" / "report.md").read_text()
    assert md.index("Summary per load step") < md.index("GENERATOR OVERLOADED") < md.index("Load curves")


def test_fail_on_slo_exit_status(tmp_path):
    run = _run(tmp_path / "run")
    args = ["report", str(run), "--no-plots", "--quiet", "--out", str(tmp_path / "o")]
    assert main(args + ["--slo", '{"ttft_p50_ms": 1}', "--fail-on-slo"]) == 1
    assert main(args + ["--slo", '{"ttft_p50_ms": 100000}', "--fail-on-slo"]) == 0
    assert main(args + ["--slo", '{"ttft_p51_ms": 1}']) == 2
    # a p95 over 20 requests per task cannot gate: "not enough samples" is not a pass
    assert main(args + ["--slo", '{"ttft_p95_ms": 100000}', "--fail-on-slo"]) == 1


def test_bad_input_exit_2_with_the_file_named(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing"), "--quiet"]) == 2
    assert "missing" in capsys.readouterr().err
    run = _run(tmp_path / "v99", format_version=99)
    assert main(["report", str(run), "--quiet"]) == 2
    assert "manifest.json: unknown format_version 99" in capsys.readouterr().err


def test_no_successful_request_exit_3(tmp_path):
    run = write_run(tmp_path / "run", [failed(i) for i in range(3)])
    assert main(["report", str(run), "--quiet", "--no-plots"]) == 3


def test_compare_exit_codes_and_default_output_dir(tmp_path, capsys):
    base = _run(tmp_path / "base")
    same = _run(tmp_path / "same")
    assert main(["compare", str(base), str(same), "--n-boot", "50"]) == 0
    out = same / "compare-vs-base"
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert unitless_keys(summary) == []
    assert (out / "compare_steps.csv").is_file() and "data:image/png;base64," in (out / "report.html").read_text()
    capsys.readouterr()
    changed = _run(tmp_path / "changed", text="other output")
    assert main(["compare", str(base), str(changed), "--n-boot", "50", "--no-plots"]) == 1
    printed = capsys.readouterr().out
    assert "GREEDY OUTPUTS CHANGED" in printed
    html = (changed / "compare-vs-base" / "report.html").read_text()
    assert "banner red" in html and "GREEDY OUTPUTS CHANGED" in html
    renamed = _run(tmp_path / "renamed", scenario_name="different")
    assert main(["compare", str(base), str(renamed), "--quiet", "--no-plots"]) == 0
    other = _run(tmp_path / "other", scenario_name="different", run_keys_offset=1000)
    assert main(["compare", str(base), str(other), "--quiet"]) == 2
    assert "did not send the same" in capsys.readouterr().err
