"""benchmarks/request_cost.py's arithmetic: the per-request/per-chunk split and what a run is charged."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from tests.helpers.runs import ROOT


def _bench(name: str) -> ModuleType:
    """A module of benchmarks/ as the script imports it (its folder on the path), path restored."""
    saved = list(sys.path)
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def _run(requests: int, chunks: int, per_request_s: float, per_chunk_s: float, startup_s: float,
         per_second_share: float = 0.0, window_s: float = 10.0) -> dict:
    """A run whose CPU is exactly start-up + a x requests + b x chunks (and its window's share likewise)."""
    rps, cps = requests / 20.0, chunks / 20.0
    return {"requests": requests, "chunks": chunks, "startup_cpu_s": startup_s,
            "whole_cpu_s": startup_s + per_request_s * requests + per_chunk_s * chunks,
            "window_requests": rps * window_s, "window_chunks": cps * window_s, "window_s": window_s,
            "window_cpu_s": (per_second_share + per_request_s * rps + per_chunk_s * cps) * window_s}


def test_the_split_recovers_the_per_request_and_per_chunk_cost_of_runs_at_three_answer_lengths():
    split = _bench("cost_split")
    # 12, 48 and 192-token answers at 3 tokens a chunk: fewer requests as answers grow
    rows = [_run(r, r * c, 150e-6, 6e-6, 0.3 + 0.01 * i) for i, (r, c) in enumerate([(40_000, 4), (14_000, 16), (4_000, 64)])]
    f = split.fit(rows)
    assert f["per_request_us"] == pytest.approx(150.0) and f["per_chunk_us"] == pytest.approx(6.0)
    assert f["window_per_request_us"] == pytest.approx(150.0) and f["window_per_chunk_us"] == pytest.approx(6.0)
    assert f["startup_s"] == pytest.approx(0.31), "the start-up is measured (the median), not fitted"
    assert f["whole_resid_max_s"] < 1e-9


def test_the_split_sets_a_fixed_answer_length_for_tokenswarm_and_the_baselines_bodies_alike():
    split = _bench("cost_split")
    length, sampling = split.length_sets(48)
    assert length == 'traffic.classes.qa.max_tokens={"dist": "fixed", "value": 48}'
    assert sampling == 'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}'


def test_plain_locusts_split_is_fitted_like_tokenswarms_and_the_line_gives_its_cost_over_ours(capsys):
    split = _bench("cost_split")
    args = type("Args", (), {"step_ms": 5.0, "tokens_per_chunk": "3", "streams": 96, "seconds": 20.0})()
    shape = [(40_000, 4), (14_000, 16), (4_000, 64)]

    def rows(per_request_s: float, per_chunk_s: float) -> list[dict]:
        out = []
        for length, (r, c) in zip((12, 48, 192), shape):
            row = _run(r, r * c, per_request_s, per_chunk_s, 0.4)
            row.update(length=length, us_per_chunk=row["whole_cpu_s"] / (r * c) * 1e6)
            out.append(row)
        return out

    ours = split.split_table(args, [dict(r, accuracy={"ttft_err_p99_ms": 0.05, "gap_err_p99_ms": 0.03,
                                                      "e2e_err_p99_ms": 0.06}) for r in rows(280e-6, 10e-6)], "this")
    theirs = split.split_table(args, rows(350e-6, 28e-6), split.PLAIN)
    printed = capsys.readouterr().out
    assert printed.count("goal: fixed CPU per request") == 1, "the goal is tokenswarm's, not plain Locust's"
    assert "-- tree: plain Locust" in printed and "     -        -        -" in printed, "no records: no errors"
    assert ours["per_request_us"] == pytest.approx(280.0) and theirs["per_chunk_us"] == pytest.approx(28.0)
    line = split.versus_line(ours, theirs, "this")
    assert "per request 350 / 280 us = 1.25x" in line and "per chunk 28.0 / 10.0 us = 2.80x" in line, line
    assert line.count("1.25x") == 2 and line.count("2.80x") == 2, "whole process and steady window alike"
    assert "= -" in split.versus_line(dict(ours, per_request_us=0.0), theirs, "this"), "no ratio of a failed fit"


def test_per_second_work_shows_as_the_three_term_fits_intercept():
    split = _bench("cost_split")
    rows = [_run(r, r * c, 150e-6, 6e-6, 0.3, per_second_share=0.02) for r, c in [(40_000, 4), (14_000, 16), (4_000, 64)]]
    f = split.fit(rows)
    assert f["per_second_share"] == pytest.approx(0.02, abs=1e-6)
    assert f["w3_per_request_us"] == pytest.approx(150.0, rel=1e-3) and f["w3_per_chunk_us"] == pytest.approx(6.0, rel=1e-3)


def test_a_run_is_charged_what_the_server_sent_it_in_its_own_time_and_its_start_up_is_measured():
    costrun = _bench("costrun")
    truth = {
        "a": {"received": 10.5, "chunks": [[10.6, 3], [10.7, 3], [10.8, 2]]},
        "b": {"received": 12.0, "chunks": [[12.1, 3], [15.2, 3]]},  # ends after the window
        "other": {"received": 30.0, "chunks": [[30.1, 3]]},  # another client's run
    }
    row = {"start": 9.0, "end": 20.0, "window": (10.0, 15.0), "whole_cpu_s": 1.6, "whole_system_cpu_s": 0.4,
           "window_cpu_s": 0.5, "cpu_samples": [(9.5, 0.2), (10.4, 0.35), (11.0, 0.5)]}
    costrun.count(row, truth)
    assert (row["requests"], row["chunks"], row["tokens"]) == (2, 5, 14)
    assert (row["window_requests"], row["window_chunks"]) == (1, 4), "a request counts in the window it ended in"
    assert row["startup_cpu_s"] == 0.35, "what the tree had spent when the server received its first request"
    assert row["us_per_chunk"] == pytest.approx(1.6 / 5 * 1e6)
    assert row["system_us_per_chunk"] == pytest.approx(0.4 / 5 * 1e6)
    assert row["window_us_per_chunk"] == pytest.approx(0.5 / 4 * 1e6)


def test_the_classes_part_runs_each_task_of_the_mix_alone_and_multi_turn_again_without_its_think_time():
    classes = _bench("cost_classes")
    rows = dict(classes.variants(ROOT / "scenarios" / "mix.yaml", no_think=True))
    tasks = ["qa", "summarization", "code", "multi_turn", "extraction"]
    assert list(rows) == [*tasks[:4], "multi_turn (no think)", "extraction", "as shipped"]
    for task in tasks:  # every other task's weight is 0, its own untouched
        assert sorted(rows[task]) == sorted(f"traffic.classes.{o}.weight=0" for o in tasks if o != task)
    assert rows["multi_turn (no think)"][-1] == "traffic.classes.multi_turn.think_time_s={dist: fixed, value: 0}"
    assert rows["as shipped"] == []
    assert "multi_turn (no think)" not in dict(classes.variants(ROOT / "scenarios" / "mix.yaml", no_think=False))


def test_the_start_up_is_the_cpu_clock_interpolated_at_the_first_request_and_ticks_only_without_it():
    costrun = _bench("costrun")
    truth = {"a": {"received": 10.5, "chunks": [[10.6, 3]]}}
    ticks = [(9.5, 0.2), (10.4, 0.3), (11.0, 0.5)]
    row = {"start": 9.0, "end": 20.0, "window": (10.0, 15.0), "whole_cpu_s": 1.0, "whole_system_cpu_s": 0.1,
           "window_cpu_s": 0.5, "cpu_samples": ticks,
           "startup_samples": [(10.49, 0.3310), (10.495, 0.3320), (10.505, 0.3340), (10.51, 0.3350)]}
    costrun.count(row, truth)
    assert row["startup_cpu_s"] == pytest.approx(0.3330), "halfway between the samples around 10.5 s"
    row["startup_samples"] = [(9.0, 0.0), (10.4, 0.3)]  # the fine samples end before the first request
    costrun.count(row, truth)
    assert row["startup_cpu_s"] == 0.3, "the ticks' last sample before it"
    assert costrun.cpu_at([(1.0, 0.1), (2.0, 0.2)], 0.5) is None and costrun.cpu_at([(1.0, 0.1)], 1.0) == 0.1


def test_a_processes_cpu_clock_counts_its_cpu_in_nanoseconds_and_is_none_once_it_is_gone():
    import subprocess

    costrun = _bench("costrun")
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.2: pass\nprint(time.process_time(), flush=True)\n"
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())  # what the child counts itself, after its busy 0.2 s
        seen = costrun.process_cpu_clock_s(child.pid)
        assert seen is not None and own <= seen < own + 0.05
        assert seen != round(seen, 2), "finer than /proc's 10 ms ticks"
    finally:
        child.communicate("", timeout=30)
    assert costrun.process_cpu_clock_s(child.pid) is None


def test_a_comparison_case_runs_a_shipped_scenario_whole_or_one_of_its_tasks_alone_for_both_clients():
    compare = _bench("cost_compare")
    tasks = ["qa", "summarization", "code", "multi_turn", "extraction"]
    cases = compare.expand_cases(["qa", "mix:multi_turn", "one-token"])
    assert [c.name for c in cases] == ["qa", "mix:multi_turn", "one-token"]
    qa, multi, one = cases
    assert (qa.scenario, qa.task, qa.sets) == ("scenarios/qa.yaml", None, ())
    assert (one.tokens, one.step_ms, one.streams_opt) == ("1", 10.0, "one_token_streams")
    assert (multi.scenario, multi.tokens, multi.step_ms, multi.task) == ("scenarios/mix.yaml", "3", 5.0, "multi_turn")
    assert sorted(multi.sets) == sorted(f"traffic.classes.{o}.weight=0" for o in tasks if o != "multi_turn")
    assert multi.slug == "mix-multi_turn", "a name fit for the run's files"
    every = compare.expand_cases(["mix:all"])
    assert [c.name for c in every] == [f"mix:{t}" for t in tasks], "every task alone, in the scenario's order"
    assert [c.task for c in every] == tasks


@pytest.mark.parametrize(("asked", "named"), [
    ("mixed", ["'mixed'", "qa, mix, one-token"]),
    ("mix:chat", ["scenarios/mix.yaml", "'chat'", "qa, summarization, code, multi_turn, extraction"]),
    ("qa:code", ["scenarios/qa.yaml", "'code'", "its tasks: qa"]),
])
def test_an_unknown_case_or_task_is_refused_naming_what_there_is(asked, named):
    compare = _bench("cost_compare")
    with pytest.raises(ValueError) as err:
        compare.expand_cases(["qa", asked])
    assert f"--cases {asked}" in str(err.value) and all(n in str(err.value) for n in named), str(err.value)


def test_the_baselines_bodies_are_built_with_the_overrides_tokenswarm_runs_the_case_with(tmp_path, monkeypatch):
    costrun = _bench("costrun")
    bodies = _bench("bench_bodies")
    asked: list[tuple] = []
    monkeypatch.setattr(bodies, "build_bodies", lambda *a: asked.append(a) or [b'{"a": 1}'])
    args = type("Args", (), {"baseline_bodies": "scenario"})()
    sets = ["traffic.classes.qa.weight=0"]
    env = costrun.baseline_bodies_env(args, tmp_path / "b.jsonl", "scenarios/mix.yaml", "http://x", 4, 2, sets)
    assert env == {"BENCH_BODIES_FILE": str(tmp_path / "b.jsonl")}
    assert asked == [(ROOT / "scenarios" / "mix.yaml", "http://x", 4, 2, sets)]
    assert (tmp_path / "b.jsonl").read_bytes() == b'{"a": 1}\n'


def test_the_cases_table_gives_each_cases_ratios_and_a_dash_for_what_was_not_measured():
    compare = _bench("cost_compare")
    results = [
        {"case": "mix:summarization", "trees": {"tokenswarm": {
            "whole": 1.49, "steady": 1.65, "us_per_chunk": 37.7, "baseline_us_per_chunk": 56.2,
            "chunks_per_request": 22.0, "requests_per_s": 741.0}}},
        {"case": "qa", "trees": {"tokenswarm": {
            "whole": None, "steady": None, "us_per_chunk": None, "baseline_us_per_chunk": None,
            "chunks_per_request": None, "requests_per_s": 0.0}}},
    ]
    head, summ, qa = compare.summary_lines(results)
    assert head.split() == ["case", "tree", "req/s", "chunks/req", "us/chunk", "baseline", "whole", "steady"]
    assert summ.split() == ["mix:summarization", "tokenswarm", "741", "22.0", "37.7", "56.2", "1.49x", "1.65x"]
    assert qa.split() == ["qa", "tokenswarm", "0", "-", "-", "-", "-", "-"]


def test_each_comparison_row_carries_the_truth_servers_lateness_during_that_run_only():
    compare = _bench("cost_compare")

    class Server:
        calls: list[bool] = []

        def stats(self, reset: bool = False) -> dict:
            self.calls.append(reset)
            return {"requests": 7, "emission_lag": {"n": 3, "p50_ms": 0.4, "p99_ms": 2.345, "max_ms": 9.0}}

    srv = Server()
    lag = compare.server_lag(srv)
    assert lag["p99_ms"] == 2.345 and srv.calls == [True], "read and reset: the next run's samples are its own"
    assert compare._lag(lag) == "2.35" and compare._lag(None) == "-" and compare._lag({"p99_ms": None}) == "-"


def test_a_classes_row_prints_cpu_per_request_and_per_chunk_whole_and_in_the_window():
    classes = _bench("cost_classes")
    row = {"requests": 1000, "chunks": 30_000, "seconds": 20.0, "whole_cpu_s": 1.5, "window_cpu_s": 0.4,
           "window_requests": 500, "us_per_chunk": 50.0, "window_us_per_chunk": 26.7, "startup_cpu_s": 0.39}
    fields = classes.row_figures(row).split()
    # requests, requests/s, chunks a request, whole us/request, window us/request, us/chunk twice, start-up
    assert fields == ["1000", "50", "30.0", "1500", "800", "50.0", "26.7", "0.390"]


def test_the_startup_table_gives_each_clients_median_its_rounds_and_its_start_up_beyond_the_baseline():
    startup = _bench("cost_startup")
    rows = [{"label": label, "startup_cpu_s": s, "whole_cpu_s": w}
            for label, s, w in [("tokenswarm", 0.60, 1.1), ("before", 0.70, 1.2), ("baseline", 0.50, 0.9),
                                ("tokenswarm", 0.62, 1.0), ("before", 0.66, 1.3), ("baseline", 0.48, 0.8),
                                ("tokenswarm", 0.58, 1.2), ("before", 0.68, 1.25), ("baseline", 0.49, 0.85)]]
    head, *lines = startup.table(rows, ["tokenswarm", "before", "baseline"])
    assert "start-up" in head and "beyond baseline" in head and "whole process" in head
    assert [line.split()[0] for line in lines] == ["tokenswarm", "before", "baseline"]
    ts = lines[0].split()
    assert ts[1] == "0.600" and ts[2:5] == ["(0.600,", "0.620,", "0.580)"]
    assert ts[5] == "0.110", "0.600 against the baseline's median 0.490"
    assert ts[6] == "1.100"
    assert lines[2].split()[5] == "0.000"


def test_together_counts_each_trees_requests_and_chunks_from_its_records(tmp_path):
    together = _bench("cost_together")
    (tmp_path / "records.jsonl").write_text(
        '{"outcome": "ok", "chunk_offsets_ms": [1.0, 2.0, 3.5]}\n'
        '{"outcome": "error", "chunk_offsets_ms": null}\n'
        '\n'
        '{"outcome": "ok", "chunk_offsets_ms": [4.0]}\n')
    assert together._records(tmp_path) == (3, 4)  # a failed request counts, with no chunks
    assert together._records(tmp_path / "missing") == (0, 0)  # a run that wrote nothing


def test_together_refuses_to_run_without_a_second_tree_or_with_two_trees_of_one_name(tmp_path):
    import argparse

    together = _bench("cost_together")
    with pytest.raises(SystemExit, match="give at least one --src"):
        together.run_together(argparse.Namespace(src=None), tmp_path)
    for side in ("a", "b"):
        (tmp_path / side / "before").mkdir(parents=True)
    with pytest.raises(SystemExit, match="share a folder name"):  # each --src is labelled by its folder
        together.run_together(argparse.Namespace(src=[str(tmp_path / "a" / "before"), str(tmp_path / "b" / "before")]),
                              tmp_path)
