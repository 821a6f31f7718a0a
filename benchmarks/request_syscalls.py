"""System calls per request: a count that does not depend on how busy the machine is.

CPU figures on a shared machine move with the neighbours; the system calls a request makes do
not (much). This runs tokenswarm on ``scenarios/qa.yaml`` with short fixed answers (the case
where per-request work dominates) against the truth server (``benchmarks/truthserver``) under
``strace -f -c``, once per tree (this one and each ``--src``, alternately), and prints the calls
per request by name, requests counted from the server's truth log. Start-up is included: run
long enough (``--seconds``) that it is small against the requests (~0.3 calls per request at
15 s, 96 streams; the table prints each run's request count).

    python benchmarks/request_syscalls.py --src /tmp/older-checkout --seconds 10
    python benchmarks/request_syscalls.py --length 12 --streams 96 --rounds 2

``strace`` slows the client (every call stops it), so the requests per second here are not the
generator's; the calls per request are. Linux only (``strace``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costrun import length_field, stamp, tokenswarm_command  # noqa: E402
from truthjoin import load_truth  # noqa: E402
from truthserver.testing import start_truth  # noqa: E402

#: Calls shown by name; the rest are summed as "other".
SHOWN = ("recvmsg", "recvfrom", "sendto", "epoll_ctl", "epoll_wait", "getsockopt", "setsockopt", "ioctl",
         "getpid", "write", "read", "futex", "clock_gettime")


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c`` table -> {syscall: calls} (errors are counted in calls too)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[3].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def run_tree(label: str, src: Path, host: str, args: argparse.Namespace, work: Path) -> tuple[dict[str, int], float, float]:
    """One traced run: (calls by name, start, end) on the monotonic clock of this process."""
    run = work / f"run-{label}"
    out = json.dumps({"dist": "fixed", "value": args.length})
    cmd = tokenswarm_command(host, "scenarios/qa.yaml", args.streams, args.seconds, run,
                             [f"traffic.classes.qa.{length_field(src)}={out}",
                              'traffic.classes.qa.sampling={"ignore_eos": true, "temperature": 0.7}'], src)
    summary = work / f"strace-{label}.txt"
    cmd = ["strace", "-f", "-c", "-o", str(summary), *cmd]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    env = {**os.environ, "PYTHONPATH": str(src)}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=args.seconds + 180)
    end = time.monotonic()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{label} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    records = run / "records.jsonl"
    outcomes: dict[str, int] = {}
    for line in records.read_text().splitlines() if records.exists() else []:
        outcome = json.loads(line)["outcome"]
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"   {label}: records by outcome {outcomes}")
    return parse_strace_summary(summary.read_text()), start, end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", metavar="DIR", help="another tree to count beside this one")
    ap.add_argument("--length", type=int, default=12, help="answer length (tokens)")
    ap.add_argument("--streams", type=int, default=96)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if not shutil.which("strace"):
        raise SystemExit("strace is not installed")
    trees = [("this", ROOT), *((Path(d).resolve().name, Path(d).resolve()) for d in args.src or [])]
    print(f"== system calls per request ({stamp()})")
    print(f"   {args.streams} streams, scenarios/qa.yaml, {args.length}-token answers, 3-token chunks every 5 ms, "
          f"{args.seconds:g} s under strace -f -c, whole process")
    with tempfile.TemporaryDirectory(prefix="syscalls-") as tmp:
        work = Path(tmp)
        truth_path = work / "truth.jsonl"
        results: list[tuple[str, dict[str, int], float, float]] = []
        with start_truth(truth_path, "--step-ms", "5", "--tokens-per-chunk", "3", cpus="1") as srv:
            for n in range(args.rounds):
                for tree, src in trees:
                    calls, t0, t1 = run_tree(f"{tree}-{n}", src, srv.base_url, args, work)
                    results.append((tree, calls, t0, t1))
            srv.flush()
        truth = load_truth(truth_path)
        header = ["tree", "requests", "total", *SHOWN, "other"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for tree, calls, t0, t1 in results:
            requests = sum(1 for t in truth.values() if t0 <= t["received"] <= t1)
            per = defaultdict(float)
            for name, c in calls.items():
                per[name if name in SHOWN else "other"] += c / max(requests, 1)
            cells = [tree, str(requests), f"{sum(per.values()):.1f}", *(f"{per[n]:.2f}" for n in (*SHOWN, "other"))]
            print("| " + " | ".join(cells) + " |")
        for tree, calls, t0, t1 in results:
            requests = max(1, sum(1 for t in truth.values() if t0 <= t["received"] <= t1))
            others = sorted(((c, n) for n, c in calls.items() if n not in SHOWN), reverse=True)[:6]
            print(f"   {tree}, other: " + ", ".join(f"{n} {c / requests:.2f}" for c, n in others))


if __name__ == "__main__":
    main()
