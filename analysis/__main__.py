"""``python -m tokenswarm.analysis report RUN_DIR`` / ``compare BASELINE CANDIDATE``: the analysis
without the load generator's command line (the same as ``tokenswarm report`` / ``compare``)."""

from __future__ import annotations

import argparse

from tokenswarm.analysis import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenswarm.analysis",
                                     description="Analyse tokenswarm run directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("report", "analyse a run directory into HTML/Markdown/JSON/CSV"),
                            ("compare", "compare a baseline run with a candidate run")):
        cli.add_arguments(sub.add_parser(name, help=help_text), name)
    status: int = cli.run(parser.parse_args(argv))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
