"""TTFT error when many requests start together, split by request phase.

Runs the README's "fixed concurrency for a fixed time" form against the simulator with its
ground-truth log -- ``tokenswarm run scenarios/qa.yaml -u N -r N -t Ts`` -- so every user
connects and sends its first request in the same instant, and joins **every** successful
record (warm-up included: each connection's first request is the case that matters) to the
server's truth by response id. Prints the TTFT error (client TTFT minus the server's time from
request read to first content chunk written) for all requests, for those on a new connection
and for those on a kept-alive one, with the connect and send-delay percentiles of the same
records. Records without phase fields (an older tokenswarm on PYTHONPATH) count in "all" only.

    python benchmarks/request_phases.py --users 64 --seconds 15
    python benchmarks/request_phases.py --users 64 --seconds 15 --set target.keep_alive=false
    python benchmarks/request_phases.py --users 64 --seconds 15 --src /tmp/older-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.truthjoin import load_truth, record_errors  # noqa: E402
from tokenswarm.sim.testing import start_sim  # noqa: E402


def q(values: list[float], p: float) -> float:
    return float(np.quantile(np.abs(values), p)) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--scenario", default="scenarios/qa.yaml")
    ap.add_argument("--profile", default="bench-10ms", help="simulator profile")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--src", type=Path, default=ROOT,
                    help="the tokenswarm source tree whose generator runs (e.g. an older commit's, for comparison)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenswarm-phases-") as tmp, \
            start_sim("--profile", args.profile, truth=True, cpus="1") as sim:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tokenswarm", "run", str(ROOT / args.scenario), "--headless", "--host",
               sim.base_url, "--out", str(out), "-u", str(args.users), "-r", str(args.users),
               "-t", f"{args.seconds}s", "--set", "target.metrics_url=null"]
        for o in args.overrides:
            cmd += ["--set", o]
        env = {**os.environ, "PYTHONPATH": str(args.src)}
        res = subprocess.run(["taskset", "-c", "0", *cmd] if os.path.exists("/usr/bin/taskset") else cmd,
                             cwd=args.src, env=env, capture_output=True, text=True)
        if res.returncode not in (0, 1):
            print(res.stderr[-3000:], file=sys.stderr)
            return 2
        records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x]
        truth = load_truth(sim.truth_path)
    groups: dict[str, list[float]] = {"all": [], "new connection": [], "kept-alive connection": []}
    connect, delay = [], []
    for r in records:
        t = truth.get(r.get("response_id") or "")
        if r["outcome"] != "ok" or t is None or not t["chunks"] or r["ttft_ms"] is None:
            continue
        err, _gaps = record_errors(r["ttft_ms"], r["chunk_offsets_ms"], t)
        groups["all"].append(err)
        reused = r.get("conn_reused")
        if reused is not None:
            groups["kept-alive connection" if reused else "new connection"].append(err)
        if r.get("connect_ms") is not None:
            connect.append(r["connect_ms"])
        if r.get("send_delay_ms") is not None:
            delay.append(r["send_delay_ms"])
    print(f"{len(records)} records, {len(groups['all'])} joined to the server's truth "
          f"({args.users} users started together, {args.seconds} s, {' '.join(args.overrides) or 'defaults'})")
    print(f"{'requests':<24}{'count':>7}{'TTFT err p50 ms':>17}{'p99 ms':>9}{'max ms':>9}")
    for name, errs in groups.items():
        print(f"{name:<24}{len(errs):>7}{q(errs, .5):>17.3f}{q(errs, .99):>9.3f}{q(errs, 1.0):>9.3f}")
    print(f"connect_ms     n={len(connect)}  p50 {q(connect, .5):.3f}  p99 {q(connect, .99):.3f}  "
          f"max {q(connect, 1.0):.3f}")
    print(f"send_delay_ms  n={len(delay)}  p50 {q(delay, .5):.3f}  p99 {q(delay, .99):.3f}  max {q(delay, 1.0):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
