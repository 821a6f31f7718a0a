"""``tokenswarm demo``: the question tokenswarm answers, on a laptop, in about five minutes.

Runs a short study (``tokenswarm study``) on the embedded simulator: the baseline arm serves
the 27B profile without speculation, the candidate with a draft model (K = 4); greedy A/B
traffic of two tasks -- code (predictable text: where speculation pays most) and open Q&A
(where it pays least) -- dealt in equal shares (``traffic.task_draw: stratified``) at
concurrency 1, 8 and 32, two interleaved rounds. It prints the verdict table: the gain of
speculative decoding at low concurrency on code, shrinking towards high concurrency
(verification turns compute-bound) and on open Q&A.

Every cell it prints is judged: each step is adaptive (``load.until``), it runs at least
:data:`MIN_STEADY_S` seconds and until every task has the requests its median needs (the study
verdict's basis, :data:`MIN_REQUESTS_PER_TASK`, from ``10 / (1 - 0.5)``) -- concurrency 1 is
the slow one -- with a cap. Outputs are shortened (``--set`` overrides, listed in the study
manifest) so that concurrency 1 fills in well under a minute. Nothing leaves 127.0.0.1.

The study report says how much load each arm carries under the scenario's SLOs (capacity per
arm, judged on the steps that have enough samples). ``--capacity`` adds a phase that measures
it properly: a capacity search per arm (``load.mode: search``, one round) on the Q&A and code
traffic under the same SLOs, and its report with the capacity table and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tokenswarm.metrics import min_samples_for
from tokenswarm.study.cli import write_study_report
from tokenswarm.study.runner import run_study
from tokenswarm.study.spec import Arm, Study, checkable
from tokenswarm.workload.scenario import ScenarioError, load_scenario, parse_override, resolve_scenario_path

if TYPE_CHECKING:  # the study package is imported when a demo runs
    from tokenswarm.study.spec import Study

#: the shortest steady window of a step (its aggregate tokens/s is binned by the second)
MIN_STEADY_S = 5
#: successful requests per task and step: what a cell's median (the verdict) needs, 10 / (1 - 0.5)
MIN_REQUESTS_PER_TASK = min_samples_for(50.0)
#: no step runs longer than this, whatever it lacks (the plan warns before the first request)
MAX_STEP_S = 90

#: traffic and load changes that make the shipped A/B scenario answer in about five minutes
DEMO_OVERRIDES = (
    "traffic.task_draw=stratified",
    "traffic.classes.summarization.weight=0",
    "traffic.classes.extraction.weight=0",
    "traffic.classes.qa.max_tokens={dist: uniform, min: 16, max: 48}",
    "traffic.classes.code.max_tokens={dist: uniform, min: 16, max: 48}",
    f"load.until={{min_requests_per_task: {MIN_REQUESTS_PER_TASK}, max_step_s: {MAX_STEP_S}}}",
)


#: the --capacity phase: a search per arm, on the Q&A and code tasks (each probe needs 200 requests
#: of every task for the TPOT p95 SLO; the rarer tasks would make the low-load probes very long)
CAPACITY_OVERRIDES = (
    "traffic.classes.summarization.weight=0",
    "traffic.classes.extraction.weight=0",
    "load.steps=null",
    "load.until=null",  # the scenario's adaptive steps: a probe extends itself instead
    "load.mode=search",
    "load.step_duration_s=30",
    "load.search={start: 4, max: 64, resolution: 2, max_step_s: 240, drain_max_s: 120}",
    # capacity is asked of the tail: the scenario gates its short steps on the median, a probe
    # extends itself until the p95 has its 200 requests per task
    "slo={tpot_p95_ms: 60, error_rate: 0.01}",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="spec-baseline", help="scenario name or path (default: spec-baseline)")
    parser.add_argument("--profile", default="27b-1gpu", help="simulator profile (default: 27b-1gpu)")
    parser.add_argument("--candidate", default="draft", choices=("draft", "ngram"),
                        help="speculation method of the candidate arm (default: draft)")
    parser.add_argument("--out", help="study directory (default: studies/demo-<time>)")
    parser.add_argument("--steps", default="[1,8,32]", help="concurrency steps (YAML list, default [1,8,32])")
    parser.add_argument("--step-duration", default=str(MIN_STEADY_S),
                        help=f"shortest steady seconds per step (default {MIN_STEADY_S}); each step then runs "
                             f"until every task has {MIN_REQUESTS_PER_TASK} requests, at most {MAX_STEP_S} s")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per arm (default 2)")
    parser.add_argument("--capacity", action="store_true",
                        help="then search each arm's capacity under the scenario's SLOs (one round, Q&A and code; "
                             "about 10-20 minutes more)")


def demo_study(args: argparse.Namespace) -> Study:
    """The demo as a study: two simulator arms, the scenario shortened by :data:`DEMO_OVERRIDES`."""
    # --gpu-metrics: the simulator's modelled GPU, scraped like a DCGM exporter next to a real server
    sim = f"{sys.executable} -m tokenswarm sim --port {{port}} --profile {args.profile} --gpu-metrics"
    arms = (Arm("baseline", f"{sim} --spec-method none"),
            Arm(args.candidate, f"{sim} --spec-method {args.candidate} --per-request-spec-decode-metrics summary"))
    overrides = (*DEMO_OVERRIDES, "target.extra_metrics=[{name: gpu, url: '{host}/dcgm/metrics'}]",
                 f"load.steps={args.steps}", "load.warmup_s=2",
                 f"load.step_duration_s={args.step_duration}")
    return Study(scenario=str(Path(resolve_scenario_path(args.scenario)).resolve()), arms=arms, baseline="baseline",
                 rounds=args.rounds, out=args.out, overrides=overrides, ready_timeout_s=60.0, warmup_requests=2,
                 source="tokenswarm demo")


def capacity_study(args: argparse.Namespace) -> Study:
    """The --capacity phase: the demo's arms, one round, each run a capacity search."""
    study = demo_study(args)
    return replace(study, rounds=1, overrides=(*study.overrides, *CAPACITY_OVERRIDES),
                   out=None if args.out is None else str(Path(args.out) / "capacity"))


def run(args: argparse.Namespace) -> int:
    study = demo_study(args)
    try:
        load_scenario(study.scenario, dict(parse_override(checkable(o)) for o in study.overrides))
    except (ScenarioError, ValueError) as exc:
        print(f"tokenswarm demo: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or f"studies/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"tokenswarm demo: baseline vs {args.candidate} speculation on the simulated {args.profile}, "
          f"steps {args.steps}, each until every task has {MIN_REQUESTS_PER_TASK} requests ({args.step_duration}-"
          f"{MAX_STEP_S} s), {args.rounds} rounds (about five minutes)")
    code = run_study(study, out)
    if code == 0:
        code = write_study_report(out)
    if code == 0 and getattr(args, "capacity", False):
        print("\ntokenswarm demo: capacity under SLO: a capacity search per arm (one round)")
        code = run_study(capacity_study(args), out / "capacity")
        if code == 0:
            code = write_study_report(out / "capacity")
    # The last line names the exit status the demo returns, whatever ended it.
    outcome = "done" if code == 0 else "the study did not complete" if code != 130 else "interrupted"
    print(f"\ntokenswarm demo: {outcome}. Study directory {out} (one run directory per arm and round under "
          f"runs/; verdict table in report/) (exit status {code})")
    return code
