"""``request_cost.py --only compare``: plain Locust and tokenswarm on the shipped scenarios as
shipped, A B A B (and each ``--src`` tree in the same rounds); the ratios of whole-process CPU
per chunk, and tokenswarm's timing errors against the truth.

A case is one of :data:`CASES`, or ``CASE:TASK``: that case with one task of its scenario alone
(every other task's weight 0, for both clients), to see for which traffic the ratio holds;
``CASE:all`` is every task of the case's scenario alone, in the scenario's order.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costrun import (
    ACCURACY_GOAL_MS,
    ROOT,
    accuracy,
    alone,
    baseline_bodies_env,
    baseline_command,
    count,
    in_turn,
    run_process,
    stamp,
    tokenswarm_command,
    trees_of,
)
from truthjoin import load_truth
from truthserver.testing import start_truth

#: (scenario, truth-server tokens per chunk, step ms, streams option) of each comparison case
CASES: dict[str, tuple[str, str, float, str]] = {
    "qa": ("scenarios/qa.yaml", "3", 5.0, "streams"),
    "mix": ("scenarios/mix.yaml", "3", 5.0, "streams"),
    "one-token": ("scenarios/qa.yaml", "1", 10.0, "one_token_streams"),
}
#: the goal: baseline / tokenswarm whole-process CPU per chunk
RATIO_GOAL = 2.0


@dataclass(frozen=True)
class Case:
    """One comparison: a case of :data:`CASES`, whole or with one of its scenario's tasks alone."""

    name: str  #: as asked (``mix``, ``mix:summarization``)
    scenario: str
    tokens: str  #: the truth server's tokens per chunk
    step_ms: float
    streams_opt: str  #: the option that gives its streams
    task: str | None = None  #: the task run alone (None: the scenario as shipped)
    sets: tuple[str, ...] = ()  #: the scenario overrides both clients' requests are built with

    @property
    def slug(self) -> str:
        """The case's name in file names."""
        return self.name.replace(":", "-")


def _task_names(scenario: str) -> list[str]:
    """The tasks of ``scenario`` that send requests (weight above 0), in its order."""
    from tokenswarm.workload.scenario import load_scenario

    return [t.name for t in load_scenario(ROOT / scenario).traffic.classes if t.weight > 0]


def expand_cases(names: list[str]) -> list[Case]:
    """The cases asked for, in order: ``qa``, ``mix``, ``one-token``, ``CASE:TASK`` or ``CASE:all``.

    Raises ValueError naming the case, or the scenario and its tasks, when one is unknown."""
    cases: list[Case] = []
    for name in names:
        base, _, task = name.partition(":")
        if base not in CASES:
            raise ValueError(f"--cases {name}: unknown case {base!r}; known: {', '.join(CASES)} "
                             f"(each may take :TASK or :all)")
        scenario, tokens, step_ms, streams_opt = CASES[base]
        if not task:
            cases.append(Case(name, scenario, tokens, step_ms, streams_opt))
            continue
        tasks = _task_names(scenario)
        if task != "all" and task not in tasks:
            raise ValueError(f"--cases {name}: {scenario} has no task {task!r} that sends requests; its tasks: "
                             f"{', '.join(tasks)}")
        for t in tasks if task == "all" else [task]:
            cases.append(Case(f"{base}:{t}", scenario, tokens, step_ms, streams_opt, t, tuple(alone(tasks, t))))
    return cases


def run_compare(args: argparse.Namespace, work: Path, case: Case) -> dict[str, Any]:
    """Plain Locust and tokenswarm on one shipped scenario (or one of its tasks alone), A B A B;
    ratios and accuracy, printed and returned (:func:`summary_lines` tabulates the returns).

    With ``--src`` trees, each round runs every tree, then the baseline (A B C B A C ...): every
    tree's ratio comes from the same rounds, so a change's effect on the ratio is measured in one
    run. The trees' order turns by one each round (with two trees and an even ``--repeat``, each
    runs first as often as second), so a place in the round that favours its runner does not
    favour one tree."""
    trees = trees_of(args, "tokenswarm")
    scenario, tokens, step_ms, sets = case.scenario, case.tokens, case.step_ms, list(case.sets)
    streams = getattr(args, case.streams_opt)
    truth_path = work / f"compare-{case.slug}-truth.jsonl"
    rows: list[dict[str, Any]] = []
    what = "as shipped" if case.task is None else f"with task {case.task} alone (the others' weight 0)"
    print(f"\n== {case.name}: {scenario} {what} vs plain Locust ({stamp()}); baseline bodies: "
          f"{args.baseline_bodies}")
    with start_truth(truth_path, "--step-ms", str(step_ms), "--tokens-per-chunk", tokens, cpus="1") as srv:
        bodies_env = baseline_bodies_env(args, work / f"compare-{case.slug}-bodies.jsonl", scenario, srv.base_url,
                                         streams, max(8, -(-2000 // streams)), sets)
        srv.stats(reset=True)  # each run's row gets the server's own lateness during it (server_lag)
        for n in range(args.repeat):
            by_tree: dict[str, dict[str, Any]] = {}
            for tree, src in in_turn(trees, n):
                run = work / f"compare-{case.slug}-{tree}-{n}"
                ts = run_process(tree, tokenswarm_command(srv.base_url, scenario, streams, args.seconds, run, sets, src),
                                 {}, args.seconds, src)
                ts.update(run=run, tree=tree, place=len(by_tree) + 1, server_lag=server_lag(srv))
                by_tree[tree] = ts
            tree_rows = [by_tree[tree] for tree, _src in trees]  # this tree first, as the ratios below pair them
            srv.flush()
            truth = load_truth(truth_path)
            count(tree_rows[0], truth)
            ts = tree_rows[0]
            mean_tokens = max(1, round(ts["tokens"] / max(1, ts["requests"])))
            base = run_process("baseline", baseline_command(srv.base_url, streams, args.seconds),
                               {"BENCH_MODEL": "truth", "BENCH_MAX_TOKENS": str(mean_tokens), **bodies_env},
                               args.seconds)
            base["server_lag"] = server_lag(srv)
            if not bodies_env:
                base["max_tokens"] = mean_tokens
            rows += [*tree_rows, base]
        srv.flush()
    truth = load_truth(truth_path)
    for r in rows:
        count(r, truth)
        if "tree" in r:
            accuracy(r, truth)
    print(f"{streams} streams, one event every {step_ms:g} ms of {tokens} token(s), {args.seconds:g} s of load; "
          f"finished {stamp()}")
    print(f"{'client':<11} {'ran':>3} {'requests':>8} {'chunks':>8} {'chunks/req':>10} {'whole us/chunk':>14} "
          f"{'whole us/req':>12} {'kernel us/chunk':>15} {'window us/chunk':>15} {'start-up s':>10} {'TTFT err p99':>12} "
          f"{'gap p99':>8} {'e2e p99':>8} {'server lag p99':>14}")
    for r in rows:
        a = r.get("accuracy")
        errs = (f"{a['ttft_err_p99_ms']:>12.2f} {a['gap_err_p99_ms']:>8.2f} {a['e2e_err_p99_ms']:>8.2f}" if a
                else f"{'-':>12} {'-':>8} {'-':>8}")
        label = r["label"] if "max_tokens" not in r else f"baseline@{r['max_tokens']}"
        ran = str(r["place"]) if "place" in r else "-"  # its place among the trees of its round
        print(f"{label:<11} {ran:>3} {r['requests']:>8} {r['chunks']:>8} {r['chunks'] / max(1, r['requests']):>10.1f} "
              f"{r['us_per_chunk'] or 0:>14.1f} {r['whole_cpu_s'] / max(1, r['requests']) * 1e6:>12.0f} "
              f"{r['system_us_per_chunk'] or 0:>15.1f} {r['window_us_per_chunk'] or 0:>15.1f} "
              f"{r['startup_cpu_s']:>10.3f} {errs} {_lag(r.get('server_lag')):>14}")
    per_round = len(trees) + 1
    rounds = [rows[i:i + per_round] for i in range(0, len(rows), per_round)]
    result: dict[str, Any] = {"case": case.name, "trees": {}}
    for k, (tree, _src) in enumerate(trees):
        pairs = [(r[k], r[-1]) for r in rounds]
        whole = sorted(b["us_per_chunk"] / t["us_per_chunk"] for t, b in pairs if b["us_per_chunk"] and t["us_per_chunk"])
        steady = sorted(b["window_us_per_chunk"] / t["window_us_per_chunk"] for t, b in pairs
                        if b["window_us_per_chunk"] and t["window_us_per_chunk"])
        name = "tokenswarm" if tree == "tokenswarm" else f"tokenswarm at {tree}"
        if whole:
            w = statistics.median(whole)
            print(f"whole-process CPU per chunk, baseline / {name}: {w:.2f}x (pairs: "
                  f"{', '.join(f'{x:.2f}x' for x in whole)}); goal >= {RATIO_GOAL:.0f}x: "
                  f"{'met' if w >= RATIO_GOAL else 'NOT met'}")
        if steady:
            print(f"steady-window CPU per chunk, baseline / {name}: {statistics.median(steady):.2f}x")
        runs = [t for t, _b in pairs]
        result["trees"][tree] = {
            "whole": statistics.median(whole) if whole else None,
            "steady": statistics.median(steady) if steady else None,
            "us_per_chunk": _median(t["us_per_chunk"] for t in runs),
            "baseline_us_per_chunk": _median(b["us_per_chunk"] for _t, b in pairs),
            "chunks_per_request": _median(t["chunks"] / t["requests"] for t in runs if t["requests"]),
            "requests_per_s": _median(t["requests"] / args.seconds for t in runs),
        }
        # The kernel's part (system CPU: reads, polls, the ACKs a read sends on loopback) is paid
        # per chunk by every client; what is left is each client's own work.
        user = sorted((b["whole_cpu_s"] - b["whole_system_cpu_s"]) / b["chunks"]
                      / ((t["whole_cpu_s"] - t["whole_system_cpu_s"]) / t["chunks"])
                      for t, b in pairs if t["chunks"] and b["chunks"] and t["whole_cpu_s"] > t["whole_system_cpu_s"])
        kernel = [(t["system_us_per_chunk"], b["system_us_per_chunk"]) for t, b in pairs
                  if t["system_us_per_chunk"] and b["system_us_per_chunk"]]
        if user and kernel:
            print(f"user-space CPU per chunk, baseline / {name}: {statistics.median(user):.2f}x; kernel CPU per "
                  f"chunk, {name} / baseline: {statistics.median(k for k, _ in kernel):.1f} / "
                  f"{statistics.median(b for _, b in kernel):.1f} us")
    errs = [r["accuracy"] for r in rows if r.get("accuracy") and r["accuracy"]["joined"]]
    if errs:
        worst = {k: max(e[k] for e in errs) for k in ("ttft_err_p99_ms", "gap_err_p99_ms", "e2e_err_p99_ms")}
        ok = all(v <= ACCURACY_GOAL_MS for v in worst.values())
        print(f"tokenswarm accuracy (worst run): TTFT error p99 {worst['ttft_err_p99_ms']:.2f} ms, chunk gap "
              f"{worst['gap_err_p99_ms']:.2f} ms, e2e {worst['e2e_err_p99_ms']:.2f} ms; goal <= "
              f"{ACCURACY_GOAL_MS:.0f} ms: {'met' if ok else 'NOT met'}")
    lags = [r["server_lag"]["p99_ms"] for r in rows if (r.get("server_lag") or {}).get("p99_ms") is not None]
    if lags:
        print(f"truth server lateness (an event's emission after it was due), p99 per run: {min(lags):.2f}-"
              f"{max(lags):.2f} ms")
    return result


def _median(values: Any) -> float | None:
    """The median of the values that were measured (None or 0: not measured), or None."""
    got = [v for v in values if v]
    return statistics.median(got) if got else None


def summary_lines(results: list[dict[str, Any]]) -> list[str]:
    """One table of every case's ratios (each tree's row), for a run of several cases."""

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    out = [f"{'case':<24} {'tree':<12} {'req/s':>7} {'chunks/req':>10} {'us/chunk':>9} {'baseline':>9} "
           f"{'whole':>7} {'steady':>7}"]
    for r in results:
        for tree, t in r["trees"].items():
            out.append(f"{r['case']:<24} {tree:<12} {fmt(t['requests_per_s'], '.0f'):>7} "
                       f"{fmt(t['chunks_per_request'], '.1f'):>10} {fmt(t['us_per_chunk'], '.1f'):>9} "
                       f"{fmt(t['baseline_us_per_chunk'], '.1f'):>9} "
                       f"{fmt(t['whole'], '.2f') + 'x' if t['whole'] else '-':>7} "
                       f"{fmt(t['steady'], '.2f') + 'x' if t['steady'] else '-':>7}")
    return out


def server_lag(srv: Any) -> dict[str, Any]:
    """The truth server's emission lag over the run just ended (its samples reset for the next; it
    keeps the latest 200,000 events, the last ~10 s of a 96-stream run)."""
    lag: dict[str, Any] = srv.stats(reset=True)["emission_lag"]
    return lag


def _lag(lag: dict[str, Any] | None) -> str:
    return "-" if not lag or lag.get("p99_ms") is None else f"{lag['p99_ms']:.2f}"
