"""``request_cost.py --only split``: CPU per request and per chunk, apart, from runs at several
answer lengths and a least-squares fit (``numpy.linalg.lstsq``).

With ``--split-baseline`` plain Locust runs at every length too, in the same rounds, sending the
same request bodies (``bench_bodies.py`` with the split's overrides), and gets the same fit: each
client's cost per request and per chunk on the same machine in the same minutes, so the ratio
per request and per chunk holds whatever the machine's speed (an absolute goal in µs does not).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from costrun import (
    ROOT,
    accuracy,
    baseline_bodies_env,
    baseline_command,
    count,
    length_field,
    run_process,
    stamp,
    tokenswarm_command,
    trees_of,
    window_figures,
)
from truthjoin import load_truth
from truthserver.testing import start_truth


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares split of CPU into per request and per chunk (``numpy.linalg.lstsq``).

    Whole process: CPU after start-up (the tree's CPU when the server received its first
    request, measured) = a x requests + b x chunks; the start-up itself is reported apart.
    Steady window: CPU share = a x requests/s + b x chunks/s -- the two-workload solve, in which
    per-second work (timers, live statistics, health sampling) lands on both. A three-term fit
    with a per-second intercept is printed too: with a few lengths at one stream count it is
    ill-conditioned (requests/s moves little), so it only shows whether the two agree.
    """
    a = np.array([[r["requests"], r["chunks"]] for r in rows], dtype=float)
    y = np.array([r["whole_cpu_s"] - r["startup_cpu_s"] for r in rows])
    (per_req, per_chunk), *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ np.array([per_req, per_chunk])
    w = np.array([[r["window_requests"] / r["window_s"], r["window_chunks"] / r["window_s"]] for r in rows])
    wy = np.array([r["window_cpu_s"] / r["window_s"] for r in rows])
    (w_req, w_chunk), *_ = np.linalg.lstsq(w, wy, rcond=None)
    wres = wy - w @ np.array([w_req, w_chunk])
    w3 = np.column_stack([np.ones(len(rows)), w])
    (per_s, w3_req, w3_chunk), *_ = np.linalg.lstsq(w3, wy, rcond=None)
    return {"startup_s": float(np.median([r["startup_cpu_s"] for r in rows])), "per_request_us": per_req * 1e6,
            "per_chunk_us": per_chunk * 1e6, "whole_resid_max_s": float(np.max(np.abs(resid))),
            "window_per_request_us": w_req * 1e6, "window_per_chunk_us": w_chunk * 1e6,
            "window_resid_max_share": float(np.max(np.abs(wres))), "per_second_share": per_s,
            "w3_per_request_us": w3_req * 1e6, "w3_per_chunk_us": w3_chunk * 1e6}


#: the name the split's plain-Locust rows go by
PLAIN = "plain Locust"


def length_sets(length: int, src: Path = ROOT) -> list[str]:
    """The overrides of ``scenarios/qa.yaml`` for answers of exactly ``length`` tokens (the tree at
    ``src`` names the field), which tokenswarm runs with and the baseline's bodies are built with."""
    out = json.dumps({"dist": "fixed", "value": length})
    return [f"traffic.classes.qa.{length_field(src)}={out}",
            'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}']


def run_split(args: argparse.Namespace, work: Path) -> None:
    """The same server and streams at each answer length, alternately; the per-request/per-chunk fit
    of each tree (this one, and ``--src`` trees side by side) and, with ``--split-baseline``, of
    plain Locust run after them in each round."""
    truth_path = work / "split-truth.jsonl"
    trees = trees_of(args)
    plain = bool(getattr(args, "split_baseline", False))
    rows: list[dict[str, Any]] = []
    print(f"\n== split: per request and per chunk ({stamp()}){'; plain Locust too' if plain else ''}")
    with start_truth(truth_path, "--step-ms", str(args.step_ms), "--tokens-per-chunk", args.tokens_per_chunk,
                     cpus="1") as srv:
        bodies = {length: baseline_bodies_env(args, work / f"split-bodies-{length}.jsonl", "scenarios/qa.yaml",
                                              srv.base_url, args.streams, max(8, -(-2000 // args.streams)),
                                              length_sets(length))
                  for length in (args.lengths if plain else [])}
        for n in range(args.repeat):
            for length in args.lengths:
                for tree, src in trees:
                    run = work / f"split-{tree}-{length}-{n}"
                    cmd = tokenswarm_command(srv.base_url, "scenarios/qa.yaml", args.streams, args.seconds, run,
                                             length_sets(length, src), src)
                    row = run_process(f"{tree} {length} tokens", cmd, {}, args.seconds, src)
                    row.update(run=run, length=length, tree=tree)
                    rows.append(row)
                if plain:
                    env = {"BENCH_MODEL": "truth", "BENCH_MAX_TOKENS": str(length), **bodies[length]}
                    row = run_process(f"{PLAIN} {length} tokens", baseline_command(srv.base_url, args.streams,
                                                                                   args.seconds), env, args.seconds)
                    row.update(length=length, tree=PLAIN)
                    rows.append(row)
        srv.flush()
    truth = load_truth(truth_path)
    for r in rows:
        count(r, truth)
        if "run" in r:  # tokenswarm's records joined to the truth (plain Locust writes none)
            accuracy(r, truth)
    fits = {tree: split_table(args, [r for r in rows if r["tree"] == tree], tree)
            for tree in [*(t for t, _src in trees), *([PLAIN] if plain else [])]}
    if plain:
        for tree, _src in trees:
            print(versus_line(fits[tree], fits[PLAIN], tree))


def versus_line(ours: dict[str, Any], theirs: dict[str, Any], tree: str) -> str:
    """A tree's per-request and per-chunk cost against plain Locust's from the same rounds (both
    fits), as plain Locust / tokenswarm: above 1, tokenswarm costs less."""

    def ratio(key: str) -> str:
        return f"{theirs[key] / ours[key]:.2f}x" if ours[key] > 0 and theirs[key] > 0 else "-"

    return (f"{tree} against {PLAIN} (their cost / ours), whole process: per request {theirs['per_request_us']:.0f} / "
            f"{ours['per_request_us']:.0f} us = {ratio('per_request_us')}, per chunk {theirs['per_chunk_us']:.1f} / "
            f"{ours['per_chunk_us']:.1f} us = {ratio('per_chunk_us')}; steady window: per request "
            f"{theirs['window_per_request_us']:.0f} / {ours['window_per_request_us']:.0f} us = "
            f"{ratio('window_per_request_us')}, per chunk {theirs['window_per_chunk_us']:.1f} / "
            f"{ours['window_per_chunk_us']:.1f} us = {ratio('window_per_chunk_us')}")


def split_table(args: argparse.Namespace, rows: list[dict[str, Any]], tree: str) -> dict[str, Any]:
    """One client's split: its runs, the two fits and the ceilings they give (the fits returned)."""
    print(f"\n-- tree: {tree}")
    print(f"truth server: one event every {args.step_ms:g} ms of {args.tokens_per_chunk} token(s), {args.streams} "
          f"streams, scenarios/qa.yaml prompts, fixed answer lengths (ignore_eos), {args.seconds:g} s each; "
          f"finished {stamp()}")
    print(f"{'answer':>7} {'requests':>9} {'chunks':>8} {'chunks/req':>10} {'whole CPU s':>11} {'start-up s':>10} {'us/chunk':>9} "
          f"{'window req/s':>12} {'chunks/s':>9} {'CPU share':>9} {'TTFT err p99':>12} {'gap p99':>8} {'e2e p99':>8}")
    for r in rows:
        print(f"{r['length']:>7} {r['requests']:>9} {r['chunks']:>8} {r['chunks'] / max(1, r['requests']):>10.1f} "
              f"{r['whole_cpu_s']:>11.2f} {r['startup_cpu_s']:>10.3f} {r['us_per_chunk'] or 0:>9.1f} {window_figures(r, 12)}")
    f = fit(rows)
    print(f"whole process: start-up {f['startup_s']:.2f} s of CPU (median, measured), then CPU = "
          f"{f['per_request_us']:.0f} us x requests + {f['per_chunk_us']:.1f} us x chunks (largest residual "
          f"{f['whole_resid_max_s']:.2f} s)")
    print(f"steady window: CPU share = {f['window_per_request_us']:.0f} us x requests/s + "
          f"{f['window_per_chunk_us']:.1f} us x chunks/s (largest residual {f['window_resid_max_share']:.3f}); "
          f"with a per-second term: {f['per_second_share']:.3f} + {f['w3_per_request_us']:.0f} us x requests/s + "
          f"{f['w3_per_chunk_us']:.1f} us x chunks/s")
    if tree != PLAIN:
        print(f"goal: fixed CPU per request <= 250 us: {'met' if f['window_per_request_us'] <= 250 else 'NOT met'} "
              f"(steady); per chunk ~5 us")
    req_us, chunk_us = f["window_per_request_us"], f["window_per_chunk_us"]
    if req_us > 0 and chunk_us > 0:
        print("ceiling of one core (1 s of CPU / (per request + chunks x per chunk), steady fit):")
        for chunks in (1, 4, 16, 64, 256):
            rps = 1e6 / (req_us + chunks * chunk_us)
            print(f"  {chunks:>4} chunks/request: {rps:>7.0f} requests/s, {rps * chunks:>7.0f} chunks/s")
    return f
