"""A study directory read: its manifest (``study.json``) and the runs that count, each with its
cells and extras.

Only arm-rounds marked done are used; a candidate's round counts when the baseline's same round
is done too (the interleaved order puts them next to each other in time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.loader import Run, load_run
from tokenswarm.analysis.study_cells import Cell, CellKey, run_cells
from tokenswarm.analysis.study_runs import RunExtras, run_extras


def load_manifest(study_dir: Path) -> dict[str, Any]:
    """The study manifest (``study.json``); missing or not JSON: a :class:`RunInputError` naming the file."""
    path = study_dir / "study.json"
    try:
        data: dict[str, Any] = orjson.loads(path.read_bytes())
        return data
    except FileNotFoundError:
        raise RunInputError(f"{path}: no study manifest (is {study_dir} a tokenswarm study directory?)") from None
    except orjson.JSONDecodeError as e:
        raise RunInputError(f"{path}: not valid JSON ({e})") from None


@dataclass
class StudyRuns:
    """Every finished run of the study (the candidates' only in rounds the baseline finished too),
    with its cells and extras, and what every ratio is computed with."""

    base_arm: str
    runs: dict[tuple[str, int], Run]
    cells: dict[tuple[str, int], dict[CellKey, Cell]]
    extras: dict[tuple[str, int], RunExtras]
    rng: np.random.Generator
    n_boot: int

    def rounds(self, arm: str) -> list[int]:
        """The rounds of ``arm`` that count, in order."""
        return sorted(r for a, r in self.cells if a == arm)


def load_study_runs(study_dir: Path, m: dict[str, Any], rng: np.random.Generator, n_boot: int) -> StudyRuns:
    """The runs of the study that count (see the module docstring), with their cells and extras."""
    base_arm = m["baseline_arm"]
    done = {(e["arm"], e["round"]): e for e in m["arm_rounds"] if e["status"] == "done"}
    base_rounds = sorted(r for a, r in done if a == base_arm)
    if not base_rounds:
        raise RunInputError(f"{study_dir / 'study.json'}: the baseline arm {base_arm!r} has no finished round")
    data = StudyRuns(base_arm, {}, {}, {}, rng, n_boot)
    for (arm, r), e in sorted(done.items()):
        if arm != base_arm and r not in base_rounds:
            continue
        run = data.runs[(arm, r)] = load_run(study_dir / e["run_dir"], keep_text=True)
        data.cells[(arm, r)] = run_cells(run, rng, n_boot)
        data.extras[(arm, r)] = run_extras(run)
    return data
