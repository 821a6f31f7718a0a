"""The study's pure parts: the study file and flags, the order, masking, readiness, the statistics."""

import argparse

import numpy as np
import pytest

from tokenswarm.analysis.stats import min_samples_for, percentile_supported
from tokenswarm.analysis.study_rounds import combine_rounds, cv, verdict_of
from tokenswarm.analysis.study_verdict import crossovers
from tokenswarm.study.order import interleaved_order
from tokenswarm.study.server import ArmServer, ServerNotReady, substitute
from tokenswarm.study.spec import Arm, StudyError, load_study_file, mask_command, parse_arm_flag, study_from_args


def args(scenario="spec-baseline", arm=(), **kw):
    base = {"baseline": None, "rounds": None, "out": None, "overrides": [], "ready_timeout": None}
    return argparse.Namespace(scenario=scenario, arm=list(arm), **{**base, **kw})


def test_the_order_alternates_every_round_so_drift_lands_on_every_arm_alike():
    order = interleaved_order(["A", "B"], 3)
    assert [a for _, a in order] == ["A", "B", "B", "A", "A", "B"]
    assert [r for r, _ in order] == [1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved_order(["A", "B"], 0)


def test_an_arm_flag_is_a_command_with_a_port_placeholder_or_a_url():
    cmd = parse_arm_flag("base=tokenswarm sim --port {port} --spec-method none")
    assert cmd.command == "tokenswarm sim --port {port} --spec-method none" and cmd.host is None
    url = parse_arm_flag("remote=http://127.0.0.1:8000")
    assert url.host == "http://127.0.0.1:8000" and url.command is None
    with pytest.raises(StudyError, match="--arm 'nothing': expected NAME=COMMAND"):
        parse_arm_flag("nothing")
    with pytest.raises(StudyError, match=r"--arm fixed: command: expected a \{port\}"):
        parse_arm_flag("fixed=tokenswarm sim --port 8000")


def test_flags_make_a_study_whose_first_arm_is_the_baseline_unless_named():
    s = study_from_args(args(arm=["a=x --port {port}", "b=y --port {port}"]))
    assert s.baseline == "a" and s.candidates == ["b"] and s.rounds == 2 and s.scenario.endswith("spec-baseline.yaml")
    s = study_from_args(args(arm=["a=x {port}", "b=y {port}"], baseline="b", rounds=3))
    assert s.baseline == "b" and s.candidates == ["a"] and s.rounds == 3
    with pytest.raises(StudyError, match="baseline: 'c' is not an arm"):
        study_from_args(args(arm=["a=x {port}", "b=y {port}"], baseline="c"))
    with pytest.raises(StudyError, match="at least two arms"):
        study_from_args(args(arm=["a=x {port}"]))
    with pytest.raises(StudyError, match="names must be unique, a repeated"):
        study_from_args(args(arm=["a=x {port}", "a=y {port}"]))
    with pytest.raises(StudyError, match="no scenario file 'nope'"):
        study_from_args(args(scenario="nope", arm=["a=x {port}", "b=y {port}"]))


def test_a_study_file_says_the_same_in_yaml_and_its_errors_name_file_and_field(tmp_path):
    f = tmp_path / "study.yaml"
    f.write_text("scenario: spec-baseline\nrounds: 3\nset: ['load.steps=[1]']\narms:\n"
                 "  base: {command: 'tokenswarm sim --port {port}'}\n"
                 "  hot: {host: 'http://127.0.0.1:9', set: ['traffic.sampling.temperature=0.7']}\n")
    s = load_study_file(str(f))
    assert [a.name for a in s.arms] == ["base", "hot"] and s.rounds == 3 and s.overrides == ("load.steps=[1]",)
    assert s.arm("hot").overrides == ("traffic.sampling.temperature=0.7",)
    assert study_from_args(args(scenario=str(f), rounds=1)).rounds == 1  # flags override the file
    cases = {
        "scenario: spec-baseline\narms: {a: {command: 'x {port}'}, b: {comand: 'y'}}\n": r"arms\.b\.comand: unknown field",
        "scenario: spec-baseline\narms: {a: {command: 'x {port}'}, b: {command: 'y {port}', host: 'http://h'}}\n":
            r"arms\.b: expected exactly one of command and host",
        "scenario: spec-baseline\nrounds: 0\narms: {a: {command: 'x {port}'}, b: {command: 'y {port}'}}\n":
            r"rounds: expected an integer >= 1",
        "scenario: spec-baseline\nround: 2\narms: {a: {command: 'x {port}'}, b: {command: 'y {port}'}}\n":
            r"round: unknown field",
    }
    for text, message in cases.items():
        f.write_text(text)
        with pytest.raises(StudyError, match=str(f) + ": " + message):
            load_study_file(str(f))


def test_secrets_in_arm_commands_are_masked_for_the_manifest():
    cmd = ("HF_TOKEN=hf_abcdefghijklmnop vllm serve m --api-key sk-live-123456789 --port {port} "
           "--metrics http://user:hunter2@127.0.0.1:9/x --password='p w'")
    masked = mask_command(cmd)
    for secret in ("hf_abcdefghijklmnop", "sk-live-123456789", "hunter2", "p w"):
        assert secret not in masked, masked
    assert "--port {port}" in masked and "http://***@127.0.0.1:9/x" in masked  # user info masked whole, as redact() does
    assert Arm("a", cmd).describe()["command"] == masked


def test_the_port_placeholders_become_a_local_port_and_url():
    assert substitute("srv --port {port} --url {host}/v1", 4242) == "srv --port 4242 --url http://127.0.0.1:4242/v1"


def test_readiness_waits_for_v1_models_and_gives_up_at_the_deadline_without_sleeping():
    now = [0.0]
    calls = []

    def probe(url):
        calls.append(url)
        if len(calls) < 3:
            raise OSError("connection refused")
        return {"data": [{"id": "m"}]}

    server = ArmServer(Arm("a", host="http://127.0.0.1:9"), "http://127.0.0.1:9")
    tick = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    assert server.wait_ready(5.0, clock=lambda: now[0], sleep=tick, probe=probe) == {"data": [{"id": "m"}]}
    assert calls == ["http://127.0.0.1:9/v1/models"] * 3

    def refuse(url):
        raise OSError("connection refused")

    with pytest.raises(ServerNotReady, match=r"arm a: http://127.0.0.1:9/v1/models did not answer within 1 s"):
        server.wait_ready(1.0, clock=lambda: now[0], sleep=tick, probe=refuse)


def test_percentiles_need_ten_samples_beyond_them():
    assert [min_samples_for(p) for p in (50, 90, 95, 99, 99.9)] == [20, 100, 200, 1000, 10000]
    assert percentile_supported(200, 95) and not percentile_supported(199, 95)


def reps(center, spread, n=1000, seed=0):
    return center * np.exp(np.random.default_rng(seed).normal(0.0, spread, n))


def test_rounds_that_agree_combine_into_one_interval_around_their_geometric_mean():
    comb = combine_rounds([2.0, 2.2], [reps(2.0, 0.05), reps(2.2, 0.05, seed=1)], np.random.default_rng(0))
    assert comb["point"] == pytest.approx((2.0 * 2.2) ** 0.5)
    lo, hi = comb["ci"]
    assert 1.85 < lo < 2.0 and 2.2 < hi < 2.4 and not comb["rounds_disagree"]
    assert verdict_of(comb, 2, True) == "faster, reproducible"
    assert verdict_of(comb, 1, True) == "faster (one round: reproducibility not tested)"
    assert verdict_of(comb, 2, False) == "not enough samples"


def test_rounds_whose_intervals_do_not_overlap_are_not_averaged_into_a_verdict():
    comb = combine_rounds([1.2, 2.4], [reps(1.2, 0.02), reps(2.4, 0.02, seed=1)], np.random.default_rng(0))
    assert comb["rounds_disagree"] and verdict_of(comb, 2, True) == "not reproducible: rounds disagree"


def test_intervals_below_or_around_one_say_slower_or_no_change():
    rng = np.random.default_rng(0)
    assert verdict_of(combine_rounds([0.7, 0.72], [reps(0.7, 0.03), reps(0.72, 0.03, seed=1)], rng), 2, True) == "slower"
    flat = combine_rounds([0.98, 1.03], [reps(0.98, 0.05), reps(1.03, 0.05, seed=1)], rng)
    assert verdict_of(flat, 2, True) == "no significant change"


def test_the_crossover_is_where_the_speedup_curve_crosses_one_in_log_load():
    rows = [{"arm": "d", "task": "qa", "load_kind": "concurrency", "load": x, "speedup": s, "aggregate_speedup": s}
            for x, s in ((1, 3.0), (8, 1.5), (32, 0.7))]
    cross = [c for c in crossovers(rows) if c["metric"] == "speedup"][0]
    assert cross["crossover_load"] == pytest.approx(8 * 4 ** 0.625)
    rows_up = [dict(r, speedup=2.0) for r in rows]
    assert [c for c in crossovers(rows_up) if c["metric"] == "speedup"][0]["pays_at_all_loads"]
    rows_down = [dict(r, speedup=0.9) for r in rows]
    assert [c for c in crossovers(rows_down) if c["metric"] == "speedup"][0]["never_pays"]


def test_variability_across_rounds_is_the_sample_coefficient_of_variation():
    assert cv([10.0, 12.0]) == pytest.approx(np.std([10, 12], ddof=1) / 11)
    assert cv([10.0]) is None and cv([10.0, None]) is None
