"""``tokenswarm report RUN_DIR`` and ``tokenswarm compare BASELINE_DIR CANDIDATE_DIR``.

Exit status: 0 ok; 1 a check failed (compare: greedy outputs diverge; report with
``--fail-on-slo``: an SLO failed); 2 bad input (missing/truncated file, unknown format
version, runs that cannot be compared, a bad ``--slo``); 3 a run without successful requests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

from tokenswarm.analysis.errors import AnalysisError
from tokenswarm.redact import redact


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """Arguments of ``report`` or ``compare`` (``name``)."""
    if name == "compare":
        parser.add_argument("baseline_dir", help="baseline run directory")
        parser.add_argument("candidate_dir", help="candidate run directory (e.g. speculative decoding on)")
        parser.add_argument("--out", help="output directory (default CANDIDATE_DIR/compare-vs-<baseline name>)")
        parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates (default 1000)")
        parser.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed (default 0)")
    else:
        parser.add_argument("run_dir", help="run directory (manifest.json + records)")
        parser.add_argument("--out", help="output directory (default RUN_DIR/report)")
        parser.add_argument("--window-s", type=float, default=60.0, help="time window for the over-time view (default 60)")
        parser.add_argument("--gpu-hour-usd", type=float, help="price of one GPU-hour (overrides scenario.cost)")
        parser.add_argument("--gpus", type=float, help="number of GPUs serving the target (default scenario.cost.gpus or 1)")
        parser.add_argument("--fail-on-slo", action="store_true", help="exit 1 when any SLO check fails")
    parser.add_argument("--slo", help="SLO block as inline JSON or a .json/.yaml file (default: scenario.slo)")
    parser.add_argument("--spec-k", type=int, help="num_speculative_tokens K, to flag coalesced chunks (> K+1 tokens)")
    parser.add_argument("--no-plots", action="store_true", help="skip figures (faster)")
    parser.add_argument("--quiet", action="store_true", help="do not print the terminal table")


def _load_slo(text: str | None) -> Any:
    if text is None:
        return None
    p = Path(text)
    if p.is_file():
        data = p.read_bytes()
        if p.suffix in (".yaml", ".yml"):
            return yaml.safe_load(data)
        text = data.decode()
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError(f"--slo: not a file and not valid JSON: {text!r}") from None


def _report(args: argparse.Namespace) -> int:
    from tokenswarm.analysis.loader import load_run  # the analysis modules (numpy): only the chosen command's

    # the analysis modules (numpy): only the chosen command's
    from tokenswarm.analysis.render_terminal import report_text
    from tokenswarm.analysis.report import write_report  # the analysis modules (numpy): only the chosen command's
    from tokenswarm.analysis.summary import analyse  # the analysis modules (numpy): only the chosen command's

    if (Path(args.run_dir) / "study.json").is_file():  # a study directory: the study report
        # the analysis modules (numpy): only the chosen command's
        from tokenswarm.analysis.study import write_study_report

        files, text = write_study_report(Path(args.run_dir))
        if not args.quiet:
            print(redact(text))
            print(redact(f"study report: {files['report.md']} (summary {files['summary.json']})"))
        return 0
    run = load_run(args.run_dir)
    summary = analyse(run, slo=_load_slo(args.slo), gpu_hour_usd=args.gpu_hour_usd, gpus=args.gpus,
                      window_s=args.window_s, spec_k=args.spec_k)
    out = Path(args.out) if args.out else run.path / "report"
    files = write_report(run, summary, out, with_plots=not args.no_plots)
    if not args.quiet:
        print(redact(report_text(summary)))
        print(f"report: {files['report.html']}")
    if args.fail_on_slo and any(not r["passed"] for r in summary["slo_results"]):
        return 1
    return 0


def _compare(args: argparse.Namespace) -> int:
    from tokenswarm.analysis.loader import load_run  # the analysis modules (numpy): only the chosen command's

    # the analysis modules (numpy): only the chosen command's
    from tokenswarm.analysis.render_terminal import compare_text
    from tokenswarm.analysis.report import write_compare  # the analysis modules (numpy): only the chosen command's
    from tokenswarm.analysis.summary import compare_summary  # the analysis modules (numpy): only the chosen command's

    base = load_run(args.baseline_dir, keep_text=True)
    cand = load_run(args.candidate_dir, keep_text=True)
    summary = compare_summary(base, cand, n_boot=args.n_boot, seed=args.seed, spec_k=args.spec_k,
                              slo=_load_slo(args.slo))
    out = Path(args.out) if args.out else cand.path / f"compare-vs-{base.name}"
    files = write_compare(base, cand, summary, out, summary["baseline_curves"], summary["candidate_curves"],
                          with_plots=not args.no_plots)
    if not args.quiet:
        print(redact(compare_text(summary)))
        print(f"report: {files['report.html']}")
    return 1 if summary["consistency"]["greedy_divergence"] else 0


def run(args: argparse.Namespace) -> int:
    """Run ``report`` or ``compare`` (``args.command``); errors print one line and set the exit status."""
    try:
        return _compare(args) if args.command == "compare" else _report(args)
    except AnalysisError as exc:
        print(redact(f"tokenswarm {args.command}: error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:  # bad --slo / SLO block
        print(redact(f"tokenswarm {args.command}: error: {exc}"), file=sys.stderr)
        return 2
