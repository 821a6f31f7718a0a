"""Soak: does memory stay flat? A bounded steady run against the simulator, master + workers.

Runs ``tokenswarm run`` with a master and ``--workers`` worker processes (Locust
``--processes``) at constant load for ``--minutes`` (default 10), then reads the run's
``generator_health.jsonl`` (every process samples its RSS every 5 s) and prints, per process,
the memory at start and end of the measured window and the growth per hour, from a
least-squares slope over the window after the first minute of warm-up (allocator and caches
settle there). Goal: under 20 MB per hour per process.

    python benchmarks/soak.py --minutes 10
    python benchmarks/soak.py --minutes 60 --users 64
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_MB_PER_H = 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    from tokenswarm.sim.testing import start_sim

    work = Path(tempfile.mkdtemp(prefix="tokenswarm-soak-"))
    scenario = work / "soak.yaml"
    scenario.write_text(json.dumps({
        "name": "soak-bench", "target": {"scrape_interval_s": 5},
        "traffic": {"seed": 3, "classes": {
            "qa": {"weight": 3, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 200},
                   "max_tokens": {"dist": "uniform", "min": 16, "max": 128}},
            "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 200, "max": 800},
                     "max_tokens": {"dist": "uniform", "min": 32, "max": 128}},
            "multi_turn": {"weight": 1, "turns": {"dist": "uniform", "min": 2, "max": 4},
                           "max_tokens": {"dist": "uniform", "min": 16, "max": 64},
                           "think_time_s": {"dist": "fixed", "value": 0.2}}}},
        "load": {"mode": "closed", "steps": [args.users], "warmup_s": 5, "step_duration_s": args.minutes * 60,
                 "stop_timeout_s": 10, "report_interval_s": 60}}))
    out = work / "run"
    with start_sim("--profile", "tiny-fast") as sim:
        cmd = [sys.executable, "-m", "tokenswarm", "run", str(scenario), "--headless", "--host", sim.base_url,
               "--out", str(out), "--workers", str(args.workers), "--records-gzip", "--only-summary"]
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode not in (0, 1):
        print(res.stdout[-3000:], res.stderr[-3000:])
        return res.returncode
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    roles: dict[str, str] = {}
    for line in (out / "generator_health.jsonl").read_text().splitlines():
        s = json.loads(line)
        series[s["worker_id"]].append((s["t"], s["rss_mb"]))
        roles[s["worker_id"]] = s.get("role", "?")
    manifest = json.loads((out / "manifest.json").read_text())
    print(f"\nsoak: {args.minutes:g} min, {args.users} users, master + {args.workers} workers against the "
          f"simulator; {manifest['totals']['records_received']} records, lost {manifest['totals']['records_lost']}")
    print(f"{'process':<28}{'role':<8}{'RSS start MB':>13}{'RSS end MB':>11}{'growth MB/h':>12}  verdict")
    worst = 0.0
    for wid, pts in sorted(series.items()):
        t = np.array([p[0] for p in pts])
        rss = np.array([p[1] for p in pts])
        keep = t >= t[0] + 60.0  # after the first minute
        if keep.sum() < 3:
            keep = np.ones_like(t, dtype=bool)
        slope_mb_per_s = float(np.polyfit(t[keep] - t[keep][0], rss[keep], 1)[0]) if keep.sum() >= 2 else 0.0
        per_h = slope_mb_per_s * 3600.0
        worst = max(worst, per_h)
        print(f"{wid:<28}{roles[wid]:<8}{rss[keep][0]:>13.1f}{rss[-1]:>11.1f}{per_h:>12.2f}  "
              f"{'ok' if per_h < GOAL_MB_PER_H else 'OVER GOAL'}")
    print(f"worst growth {worst:.2f} MB/h per process (goal < {GOAL_MB_PER_H:g} MB/h)")
    if args.keep:
        print(f"run directory: {out}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
