"""``tokenswarm run SCENARIO``: validate the scenario, then hand over to Locust.

Everything after the scenario that tokenswarm does not know is passed to Locust unchanged
(``-u``, ``-t``, ``--web-port``, ``--processes``, ``--master`` ...). The scenario is validated
first, so a bad file exits with status 2 before any traffic is sent.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PASSTHROUGH = True


def locustfile_path() -> str:
    import tokenswarm

    return str(Path(tokenswarm.__file__).parent / "locustfile.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario YAML (path, or a name under scenarios/)")
    parser.add_argument("--host", help="target base URL (overrides target.base_url)")
    parser.add_argument("--headless", action="store_true", help="no web UI; run the scenario's plan and exit")
    parser.add_argument("--out", help="run directory (default: runs/<run id>)")
    parser.add_argument("--workers", type=int, default=0,
                        help="local worker processes (Locust --processes); 0 = a single process")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a scenario field, e.g. --set load.steps=[1,8] (repeatable)")
    parser.epilog = "Other options are passed to Locust (e.g. -u 8 -t 60s, --web-port, --master, --expect-workers)."


def build_locust_argv(args: argparse.Namespace, scenario_path: str) -> list[str]:
    argv = ["-f", locustfile_path(), "--scenario", scenario_path]
    if args.host:
        argv += ["--host", args.host]
    if args.headless:
        argv.append("--headless")
    else:
        argv += ["--web-host", "127.0.0.1"] if "--web-host" not in args.passthrough else []
    if args.out:
        argv += ["--out", args.out]
    if args.workers:
        argv += ["--processes", str(args.workers)]
    for o in args.overrides:
        argv += ["--set", o]
    return argv + list(args.passthrough)


def run(args: argparse.Namespace) -> int:
    from tokenswarm.load.scenario import ScenarioError, load_scenario, parse_override, resolve_scenario_path

    path = resolve_scenario_path(args.scenario)
    try:
        overrides = dict(parse_override(o) for o in args.overrides)
        load_scenario(path, overrides or None)
    except (ScenarioError, ValueError) as exc:
        print(f"tokenswarm: {exc}", file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "locust"] + build_locust_argv(args, path)
    sys.stdout.flush()
    os.execv(sys.executable, argv)  # Locust owns the process from here (signals, exit status)
    return 0  # not reached
