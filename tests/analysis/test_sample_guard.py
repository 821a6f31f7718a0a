"""The sample-size guard in the run report: a percentile its n cannot support is never a number."""

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis.render_doc import guarded
from tokenswarm.cli import main


def test_a_percentile_cell_shows_n_below_what_it_needs_instead_of_a_number():
    row = {"ttft_count": 30, "ttft_p50_ms": 100.0, "ttft_p99_ms": 180.0, "ttft_p99_9_ms": 190.0}
    assert guarded(row, "ttft_p50_ms") == "100"
    assert guarded(row, "ttft_p99_ms") == "n<1000" and guarded(row, "ttft_p99_9_ms") == "n<10000"
    assert guarded({"ttft_count": 0, "ttft_p99_ms": None}, "ttft_p99_ms") == "—"  # not observed stays a dash


def test_the_report_of_a_small_run_prints_p50_but_not_p99(tmp_path, capsys):
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i * 0.2) for i in range(30)]
    run = write_run(tmp_path / "run", recs, steps=[step(0, "concurrency", 1, T0, T0, T0 + 10)])
    assert main(["report", str(run), "--no-plots", "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert "n<1000" in printed
    md = (tmp_path / "o" / "report.md").read_text()
    assert "n<1000" in md and "n<10000" in md
