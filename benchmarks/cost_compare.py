"""``request_cost.py --only compare``: plain Locust and tokenswarm on the shipped scenarios as
shipped, A B A B (and each ``--src`` tree in the same rounds); the ratios of whole-process CPU
per chunk, and tokenswarm's timing errors against the truth."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from costrun import (
    ACCURACY_GOAL_MS,
    accuracy,
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


def run_compare(args: argparse.Namespace, work: Path, case: str) -> None:
    """Plain Locust and tokenswarm on one shipped scenario, A B A B; ratios and accuracy.

    With ``--src`` trees, each round runs every tree, then the baseline (A B C B A C ...): every
    tree's ratio comes from the same rounds, so a change's effect on the ratio is measured in one
    run. The trees' order turns by one each round (with two trees and an even ``--repeat``, each
    runs first as often as second), so a place in the round that favours its runner does not
    favour one tree."""
    trees = trees_of(args, "tokenswarm")
    scenario, tokens, step_ms, streams_opt = CASES[case]
    streams = getattr(args, streams_opt)
    truth_path = work / f"compare-{case}-truth.jsonl"
    rows: list[dict[str, Any]] = []
    print(f"\n== {case}: {scenario} as shipped vs plain Locust ({stamp()}); baseline bodies: "
          f"{args.baseline_bodies}")
    with start_truth(truth_path, "--step-ms", str(step_ms), "--tokens-per-chunk", tokens, cpus="1") as srv:
        bodies_env = baseline_bodies_env(args, work / f"compare-{case}-bodies.jsonl", scenario, srv.base_url,
                                         streams, max(8, -(-2000 // streams)))
        srv.stats(reset=True)  # each run's row gets the server's own lateness during it (server_lag)
        for n in range(args.repeat):
            by_tree: dict[str, dict[str, Any]] = {}
            for tree, src in in_turn(trees, n):
                run = work / f"compare-{case}-{tree}-{n}"
                ts = run_process(tree, tokenswarm_command(srv.base_url, scenario, streams, args.seconds, run, [], src),
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


def server_lag(srv: Any) -> dict[str, Any]:
    """The truth server's emission lag over the run just ended (its samples reset for the next; it
    keeps the latest 200,000 events, the last ~10 s of a 96-stream run)."""
    lag: dict[str, Any] = srv.stats(reset=True)["emission_lag"]
    return lag


def _lag(lag: dict[str, Any] | None) -> str:
    return "-" if not lag or lag.get("p99_ms") is None else f"{lag['p99_ms']:.2f}"
