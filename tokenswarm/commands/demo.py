"""``tokenswarm demo``: the whole job on a laptop -- simulator, mixed load, report.

Starts the embedded simulator on a free local port (its own process session), runs the
default mixed scenario briefly against it, writes the run directory and the report, and
names them. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="mix", help="scenario name or path (default: mix)")
    parser.add_argument("--profile", default="27b-1gpu", help="simulator profile (default: 27b-1gpu)")
    parser.add_argument("--spec-method", default="none", choices=("none", "draft", "ngram"))
    parser.add_argument("--out", help="run directory (default: runs/demo-<time>)")
    parser.add_argument("--steps", default="[1,4,8]", help="load steps for the demo (YAML list)")
    parser.add_argument("--step-duration", default="8", help="steady seconds per step")


def run(args: argparse.Namespace) -> int:
    from tokenswarm.sim.testing import start_sim

    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"tokenswarm demo: starting the simulator (profile {args.profile}, speculation {args.spec_method})")
    with start_sim("--profile", args.profile, "--spec-method", args.spec_method) as sim:
        print(f"tokenswarm demo: simulator at {sim.base_url}; running scenario {args.scenario!r} -> {out}")
        cmd = [sys.executable, "-m", "tokenswarm", "run", args.scenario, "--headless", "--host", sim.base_url,
               "--out", str(out), "--set", f"load.steps={args.steps}", "--set", "load.warmup_s=2",
               "--set", f"load.step_duration_s={args.step_duration}", "--only-summary"]
        code = subprocess.call(cmd)
    if code not in (0, 1):
        print(f"tokenswarm demo: the run failed (exit status {code})", file=sys.stderr)
        return code
    report_dir = out / "report"
    with contextlib.suppress(ImportError):
        import analysis.cli  # noqa: F401

        rc = subprocess.call([sys.executable, "-m", "tokenswarm", "report", str(out), "--out", str(report_dir)])
        if rc not in (0, 1):
            print(f"tokenswarm demo: the report failed (exit status {rc})", file=sys.stderr)
            return rc
    if not os.path.exists(out / "records.jsonl"):
        print(f"tokenswarm demo: the run wrote no records in {out} (exit status 3)", file=sys.stderr)
        return 3
    print("\ntokenswarm demo: done.")
    print(f"  records:  {out / 'records.jsonl'}")
    print(f"  manifest: {out / 'manifest.json'}")
    if (report_dir / "report.html").exists():
        print(f"  report:   {report_dir / 'report.html'}  (also report.md, summary.json)")
    # The demo's exit status is the run's verdict, as printed above (0 PASS, 1 an SLO missed).
    verdict = "PASS" if code == 0 else "FAIL (SLO missed)"
    print(f"  verdict:  {verdict}, see {out / 'slo.json'} (exit status {code})")
    return code
