"""The demo's --capacity phase: the same arms, one round, each run a capacity search that parses."""

from __future__ import annotations

import argparse

from tokenswarm.commands import demo
from tokenswarm.study.cli import checkable
from tokenswarm.workload.scenario import load_scenario, parse_override


def args(**kw):
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args([f"--{k.replace('_', '-')}={v}" if v is not True else f"--{k}" for k, v in kw.items()])


def test_the_capacity_phase_searches_each_demo_arm_under_the_scenario_slos(tmp_path):
    a = args(capacity=True, out=str(tmp_path / "demo"))
    assert a.capacity
    study = demo.capacity_study(a)
    base = demo.demo_study(a)
    assert study.arms == base.arms and study.rounds == 1 and study.out == str(tmp_path / "demo" / "capacity")
    sc = load_scenario(study.scenario, dict(parse_override(checkable(o)) for o in study.overrides))
    assert sc.load.mode == "search" and sc.load.loop == "closed" and sc.load.search.resolution == 2
    assert sc.slo.overall == {"tpot_p95_ms": 60, "error_rate": 0.01}  # the tail, as docs/capacity.md measured it
    assert {t.name for t in sc.traffic.classes if t.weight > 0} == {"qa", "code"}
