"""``tokenswarm run SCENARIO``: validate the scenario, then hand over to Locust.

Everything after the scenario that tokenswarm does not know is passed to Locust unchanged
(``-u``, ``-t``, ``--web-port``, ``--processes``, ``--master`` ...). The scenario is validated
first, so a bad file exits with status 2 before any traffic is sent.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tokenswarm
from tokenswarm.commands.workers import preflight as distributed_preflight
from tokenswarm.load.setup import planned_duration_s, scenario_slos
from tokenswarm.orchestrate.sizing import plan_cells, plan_lines
from tokenswarm.orchestrate.verdict import merge_slos, parse_slo_args
from tokenswarm.redact import redact, remember_target
from tokenswarm.workload.scenario import ScenarioError, load_scenario, parse_override, resolve_scenario_path

if TYPE_CHECKING:  # the scenario model is imported where a command needs it
    from tokenswarm.workload.scenario import Scenario

PASSTHROUGH = True
#: the worker token's variable (tokenswarm.orchestrate.admission.TOKEN_VAR; not imported: Locust loads late)
TOKEN_VAR = "TOKENSWARM_WORKER_TOKEN"


def locustfile_path() -> str:
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
    parser.add_argument("--slo", action="append", default=[], metavar="NAME=VALUE",
                        help="SLO for the verdict (repeatable; TASK.NAME=VALUE for one task), e.g. ttft_p95_ms=800")
    parser.add_argument("--insecure", action="store_true",
                        help="do not verify the target's TLS certificate (same as --set target.verify_tls=false)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate the scenario and print the plan (steps, expected requests); send nothing")
    forwarded = parser.add_argument_group(
        "run options (also accepted by locust -f locustfiles/llm.py)"
    )
    for flags, kwargs in locustfile_options():
        forwarded.add_argument(*flags, **kwargs)
    parser.epilog = (
        "Other options are passed to Locust (e.g. -u 8 -t 60s, --web-port, --master, --expect-workers, "
        "--print-stats to show Locust's periodic statistics tables; python -m locust --help lists them)."
    )


class _OptionRecorder:
    """Stands in for Locust's parser to read the options the plugin registers."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        self.options.append((flags, kwargs))

    def set_defaults(self, **_defaults: Any) -> None:
        """Locust's own options' defaults (bind addresses): Locust's parser applies them, not ``run``."""


#: options this command defines itself (the plugin has them too, under the same flags)
_OWN_FLAGS = frozenset({"--scenario", "--out", "--set", "--slo"})


def locustfile_options() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """The plugin's own Locust options (one definition: read from the plugin), as argparse args."""
    from tokenswarm.orchestrate.options import add_options  # without Locust: it loads after the exec

    recorder = _OptionRecorder()
    add_options(recorder)
    out = []
    for flags, kwargs in recorder.options:
        if kwargs.get("help") is argparse.SUPPRESS or _OWN_FLAGS.intersection(flags):
            continue
        kwargs = {k: v for k, v in kwargs.items() if k != "include_in_web_ui"}
        if kwargs.get("action") not in ("store_true", "append"):
            kwargs.setdefault("metavar", flags[0].lstrip("-").replace("-", "_").upper())
        out.append((flags, kwargs))
    return out


def _forwarded_argv(args: argparse.Namespace) -> list[str]:
    """The plugin's options as given to ``run``, rebuilt for Locust's command line."""
    argv: list[str] = []
    for flags, kwargs in locustfile_options():
        dest = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        value = getattr(args, dest, None)
        action = kwargs.get("action")
        if action == "store_true":
            argv += [flags[0]] if value else []
        elif action == "append":
            for item in value or []:
                argv += [flags[0], str(item)]
        elif value is not None and value != kwargs.get("default"):
            argv += [flags[0], str(value)]
    return argv


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
    for o in args.slo:
        argv += ["--slo", o]
    return argv + _forwarded_argv(args) + list(args.passthrough)


def run(args: argparse.Namespace) -> int:
    path = resolve_scenario_path(args.scenario)
    if args.insecure:
        args.overrides.append("target.verify_tls=false")
    try:
        overrides = dict(parse_override(o) for o in args.overrides)
        load_scenario(path, overrides or None)  # the file's own errors first, then the flags'
        flags = run_flags(args)
        scenario = flags.check(path, overrides)
        slos = merge_slos(scenario_slos(scenario), parse_slo_args(args.slo))
    except (ScenarioError, ValueError) as exc:
        print(f"tokenswarm: {redact(str(exc))}", file=sys.stderr)
        return 2
    if args.dry_run:
        remember_target(scenario.target, args.host)
        try:
            print(redact(plan_text(scenario, slos, args.host, users=flags.users_count(), run_time_s=flags.run_time_s(),
                                   max_run_time_s=flags.max_run_time)), flush=True)
        except BrokenPipeError:  # `tokenswarm run qa --dry-run | head`: the reader had enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return 0

    try:
        args.passthrough = list(args.passthrough) + distributed_preflight(list(args.passthrough), args.workers)
    except ValueError as exc:
        print(f"tokenswarm: {exc}", file=sys.stderr)
        return 2
    if args.workers and not os.environ.get(TOKEN_VAR):
        # local workers are forked by Locust and inherit this: the master admits only them
        os.environ[TOKEN_VAR] = secrets.token_urlsafe(32)
    argv = [sys.executable, "-m", "locust"] + build_locust_argv(args, path)
    sys.stdout.flush()
    os.execv(sys.executable, argv)  # Locust owns the process from here (signals, exit status)
    return 0  # not reached


def run_flags(args: argparse.Namespace) -> Any:
    """The plan-shaping flags of this command line: the plugin's own, and -u/-t from Locust's."""
    from tokenswarm.orchestrate.runflags import RunFlags

    locust_flags = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    locust_flags.add_argument("-u", "--users", dest="users")
    locust_flags.add_argument("-t", "--run-time", dest="run_time")
    known, _ = locust_flags.parse_known_args(list(args.passthrough))
    return RunFlags(steps=args.tokenswarm_steps, step_duration=args.tokenswarm_step_duration, warmup=args.tokenswarm_warmup,
                    users=known.users, run_time=known.run_time, max_run_time=args.tokenswarm_max_run_time)


def plan_text(scenario: Scenario, slos: dict[str, Any], host: str | None, *, users: int | None = None, run_time_s: float | None = None,
              max_run_time_s: float | None = None) -> str:
    """The load plan as a person reads it: steps, windows, expected requests, SLOs, what it can judge.

    ``users`` (-u) replaces the steps by one fixed concurrency; ``run_time_s`` (-t) caps the
    run; ``max_run_time_s`` is the hard stop (0/None: the default guard).
    """
    load = scenario.load
    lines = [f"scenario {scenario.name} ({scenario.path}) -> {host or scenario.target.base_url} [{scenario.target.api}]",
             "traffic: " + ", ".join(f"{t.name} ({t.kind}) weight {t.weight:g}" for t in scenario.traffic.classes
                                      if t.weight > 0)]
    if users is not None:  # -u: what the plugin runs instead of the scenario's steps
        lines.append(f"load: fixed concurrency of {users} users (-u), closed loop; the scenario's steps are not used")
        lines.append(f"  step 0 u{users}: " + (f"{run_time_s:g} s (-t)" if run_time_s else "until stopped (no -t)"))
        lines.append(f"planned duration ~{run_time_s:.0f} s" if run_time_s else "planned duration: until stopped")
        return "\n".join(lines + _plan_tail(slos, max_run_time_s))
    lines.append(f"load: {load.mode if load.mode == load.loop else f'{load.mode} ({load.loop})'} loop, warm-up "
                 f"{load.warmup_s:g} s + steady {load.step_duration_s:g} s per step")
    fixed = load.search is None and load.sweep is None  # a search or sweep sizes each probe itself
    expected_all = [c.expected for c in plan_cells(scenario, slos) if c.task == "all"] if fixed else []
    if load.search is not None:
        se = load.search
        unit = "users" if se.over == "concurrency" else "req/s"
        lines.append(f"  capacity search over {se.over}: {se.start:g}, x{se.factor:g} while the SLOs hold (at most "
                     f"{se.max:g} {unit}), then bisection to {se.resolution:g} {unit}; at most {se.max_probes()} probes, "
                     f"each window extended up to {se.max_step_s:g} s for the sample-size rule, drained up to "
                     f"{se.drain_max_s:g} s")
    elif load.sweep is not None:
        sw = load.sweep
        lines.append(f"  sweep: saturation at {sw.max_concurrency} users, then 1 user, then {sw.steps} steps "
                     "spread between 1 and the saturation concurrency (X_max / X_1, Little's law)")
    for i, target in enumerate(load.steps if fixed else ()):
        if load.mode == "replay":
            expected = (f"~{target * load.step_duration_s:.0f} requests of {load.trace} ({load.trace_format}) "
                        f"at speed x{load.speed:g}")
            name = "replay"
        elif load.mode == "open":
            expected = f"~{target * load.step_duration_s:.0f} requests in the steady window ({load.arrival})"
            name = f"r{target:g}"
        else:
            # closed loop: depends on latency; the sizing estimate (its assumptions are printed below)
            expected = f"~{expected_all[i]:.0f} requests (estimate, see sizing)"
            name = f"c{int(target)}"
        lines.append(f"  step {i} {name}: {expected}")
    planned = planned_duration_s(scenario)
    lines.append(f"planned duration ~{planned:.0f} s"
                 + (f", cut at {run_time_s:g} s by -t (the steps after it do not run)" if run_time_s and run_time_s < planned
                    else ""))
    return "\n".join(lines + _plan_tail(slos, max_run_time_s, plan_lines(scenario, slos) if fixed else ([], [])))


def _plan_tail(slos: dict[str, Any], max_run_time_s: float | None, sizing: tuple[list[str], list[str]] = ([], [])) -> list[str]:
    """The plan's last lines: the hard stop, the SLOs, what the plan can judge (``sizing``: lines
    and warnings of :func:`~tokenswarm.orchestrate.sizing.plan_lines`)."""
    lines = []
    if max_run_time_s:
        lines.append(f"hard stop: --max-run-time {max_run_time_s:g} s (requests in flight are cancelled)")
    lines.append("SLOs: " + (", ".join(f"{k}={v}" for k, v in slos.items() if k != "per_task") or "none")
                 + (f"; per task {slos['per_task']}" if slos.get("per_task") else ""))
    sizing_lines, warnings = sizing
    lines += sizing_lines + [f"WARNING: {w}" for w in warnings]
    lines.append("dry run: nothing was sent")
    return lines
