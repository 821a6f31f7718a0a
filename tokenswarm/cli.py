"""The ``tokenswarm`` command: a thin dispatcher to one module per subcommand.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is
imported only when chosen, so ``tokenswarm sim`` never pays for Locust or matplotlib.
Exit statuses: 0 success, 1 a check failed (e.g. an SLO), 2 bad configuration or usage,
3 the run itself broke.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from typing import Any, Callable

from tokenswarm import __version__

#: name -> (module, one-line help). Order is the order shown in ``--help``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("tokenswarm.commands.demo", "a short study on the simulator: baseline vs speculative decoding, the verdict table"),
    "sim": ("tokenswarm.sim.cli", "serve the simulated OpenAI-compatible LLM server"),
    "run": ("tokenswarm.commands.run", "run a scenario with Locust (headless or web UI, local or distributed)"),
    "report": ("tokenswarm.analysis.cli", "analyse a run directory into HTML/Markdown/JSON/CSV"),
    "compare": ("tokenswarm.analysis.cli", "compare a baseline run with a candidate run (e.g. speculative decoding)"),
    "study": ("tokenswarm.study.cli", "repeated, interleaved A/B study of server arms, with the verdict table"),
    "make-test-model": ("tokenswarm.testmodel.cli", "build a tiny local Llama model for real-vLLM tests"),
    "export": ("tokenswarm.commands.export", "export a run's Parquet records store as JSON lines"),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="tokenswarm",
        description="Distributed load generator for LLM serving stacks, built on Locust.",
    )

    parser.add_argument("--version", action="version", version=f"tokenswarm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers: dict[str, argparse.ArgumentParser] = {}
    for name, (_module, help_text) in SUBCOMMANDS.items():
        subparsers[name] = sub.add_parser(name, help=help_text, description=help_text)
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = build_parser()
    if not argv or argv[0] not in SUBCOMMANDS:
        # Let argparse print help / "invalid choice" with exit status 2.
        parser.parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    module = importlib.import_module(SUBCOMMANDS[name][0])
    sp = subparsers[name]
    module.add_arguments(sp, name) if _takes_name(module.add_arguments) else module.add_arguments(sp)
    if getattr(module, "PASSTHROUGH", False):
        args, extra = sp.parse_known_args(argv[1:])
        args.passthrough = extra
    else:
        args = sp.parse_args(argv[1:])
    args.command = name
    return int(module.run(args) or 0)


def _takes_name(fn: Callable[..., Any]) -> bool:
    return len(inspect.signature(fn).parameters) >= 2
