"""Where scenario files are found: a path as given, ``scenarios/`` in the working directory, or
the scenarios shipped with tokenswarm (the checkout's top-level folder, or the installed copy,
which pyproject.toml's package-dir mapping puts at ``tokenswarm/scenarios``). A file that a
scenario names (tokenizer, dataset, trace) is found by :func:`_resolve_file`: relative to the
scenario's folder, then to the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def shipped_scenarios_dir() -> Path:
    """The shipped scenarios: the checkout's ``scenarios/`` folder, or the installed copy.

    A wheel carries the top-level folder as ``tokenswarm/scenarios`` (pyproject.toml's
    ``[tool.setuptools.package-dir]``).
    """
    # this file is tokenswarm/workload/scenario/paths.py: parents[3] is the checkout, parents[2] the package
    checkout = Path(__file__).resolve().parents[3] / "scenarios"
    if checkout.is_dir():
        return checkout
    return Path(__file__).resolve().parents[2] / "scenarios"


def resolve_scenario_path(name_or_path: str) -> str:
    """A path as given if it exists, else ``scenarios/NAME[.yaml]`` (cwd, then the checkout's folder)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    if "/" not in name_or_path and os.sep not in name_or_path:
        stem = name_or_path if name_or_path.endswith((".yaml", ".yml")) else name_or_path + ".yaml"
        for folder in (Path.cwd() / "scenarios", shipped_scenarios_dir()):
            if (folder / stem).is_file():
                return str(folder / stem)
    return name_or_path


def _resolve_file(raw: str, base_dir: Path) -> str | None:
    p = Path(os.path.expanduser(raw))
    for cand in [p] if p.is_absolute() else [base_dir / p, Path.cwd() / p]:
        if cand.is_file():
            return str(cand.resolve())
    return None
