"""``tokenswarm study SCENARIO --arm NAME=COMMAND [--arm ...] [--baseline NAME] [--rounds N] [--out DIR]``.

Exit status: 0 the study completed (its report is written), 2 bad input (study file, flags,
scenario, a directory holding another study), 3 an arm's server never became ready, died
mid-round, or a run broke (finished arm-rounds are kept; the same command resumes).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tokenswarm.redact import install_log_redaction, redact
from tokenswarm.study.runner import run_study
from tokenswarm.study.spec import HOST_PLACEHOLDER_URL, StudyError, checkable, remember_study_secrets, study_from_args  # noqa: F401  (imported from here by callers)
from tokenswarm.workload.scenario import ScenarioError, load_scenario, parse_override


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario (name or path), or a study file (YAML with an arms section)")
    parser.add_argument("--arm", action="append", default=[], metavar="NAME=COMMAND",
                        help="an arm: a shell command with {port} (or {host}) that starts its server, or "
                             "NAME=http://HOST:PORT for a running server (repeatable; the first is the baseline)")
    parser.add_argument("--baseline", help="name of the baseline arm (default: the first)")
    parser.add_argument("--rounds", type=int, help="rounds per arm, interleaved A B B A ... (default 2)")
    parser.add_argument("--out", help="study directory (default studies/<scenario>-<time>); an existing one resumes")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a scenario field for every arm, e.g. --set load.steps=[1,8]")
    parser.add_argument("--ready-timeout", type=float, metavar="S",
                        help="seconds to wait for an arm's /v1/models (default 600)")
    parser.add_argument("--no-report", action="store_true", help="do not write the study report at the end")




def run(args: argparse.Namespace) -> int:
    install_log_redaction()
    try:
        study = study_from_args(args)
        overrides = dict(parse_override(checkable(o)) for o in study.overrides)
        # a bad scenario fails now, before any server starts
        scenarios = [load_scenario(study.scenario, overrides or None)]
        for arm in study.arms:
            scenarios.append(load_scenario(
                study.scenario, {**overrides, **dict(parse_override(checkable(o)) for o in arm.overrides)} or None))
        remember_study_secrets(study, scenarios)  # before anything is printed or written
    except (StudyError, ScenarioError, ValueError) as exc:
        print(redact(f"tokenswarm study: {exc}"), file=sys.stderr)
        return 2
    out = Path(study.out or f"studies/{Path(study.scenario).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    code = run_study(study, out, say=lambda text: print(redact(text), flush=True))
    if code != 0 or args.no_report:
        return code
    return write_study_report(out)


def write_study_report(out: Path, quiet: bool = False) -> int:
    """Analyse the study directory, write ``report/`` and print the verdict table."""
    try:
        from tokenswarm.analysis.errors import AnalysisError  # the analysis (numpy): only for the study report

        # the analysis (numpy): only for the study report
        from tokenswarm.analysis.study import write_study_report as write
    except ImportError as e:  # analysis extra not installed
        print(f"tokenswarm study: the study ran; no report ({e})", file=sys.stderr)
        return 0

    try:
        files, text = write(out)
    except AnalysisError as exc:
        print(redact(f"tokenswarm study: report: {exc}"), file=sys.stderr)
        return exc.exit_code
    if not quiet:
        print(redact(text))
        print(redact(f"study report: {files['report.md']} (summary {files['summary.json']})"))
    return 0
