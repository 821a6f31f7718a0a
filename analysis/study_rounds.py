"""One cell's ratio, candidate over baseline, combined over rounds, and the verdict it earns.

* Per round: ratio replicates = candidate replicate / baseline replicate (the within-run
  replicates of :mod:`analysis.study_cells`).
* Over rounds (two-stage, hierarchical bootstrap): each combined replicate draws R rounds
  with replacement and, for each drawn round, that round's within-run ratio replicate, and
  takes their geometric mean. Its 2.5-97.5 % percentiles are the 95 % interval: it widens
  with between-round spread (resampling rounds) and within-run noise (the replicates). The
  point estimate is the geometric mean of the per-round ratios.
* Rounds disagree when their per-round 95 % intervals do not all overlap (the largest lower
  bound is above the smallest upper bound): the cell says so instead of a combined number.
* Sample-size guard: a p-th percentile needs n >= 10 / (1 - p/100) successful requests in
  every run of the cell (:func:`analysis.stats.min_samples_for`); otherwise the ratio is
  ``None`` and marked insufficient. A cell whose runs have fewer than 20 successful requests
  (what the median needs) gets the verdict "not enough samples".

Beside them, what else is summed up over rounds: the coefficient of variation and the
tokens-per-chunk histograms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tokenswarm.analysis.stats import bootstrap_percentiles, min_samples_for, percentiles_sorted
from tokenswarm.analysis.study_cells import Cell

LEVEL = 0.95
#: The verdict of a cell fed by an overloaded generator (it replaces any other verdict).
SUSPECT = "suspect: generator overloaded"
#: successful requests a run needs in a cell for its median (the verdict's basis): 10 / (1 - 0.5)
MIN_CELL_REQUESTS = min_samples_for(50.0)

VERDICT_RULES = {
    "not enough samples": f"a run of this cell has fewer than {MIN_CELL_REQUESTS} successful requests "
                          "(the median needs 10 / (1 - 0.5))",
    "not reproducible: rounds disagree": "the rounds' 95 % intervals of the speedup do not all overlap",
    "faster, reproducible": "the 95 % interval over >= 2 rounds lies above 1",
    "faster (one round: reproducibility not tested)": "the 95 % interval lies above 1, but only one round ran",
    "slower": "the 95 % interval lies below 1",
    "no significant change": "the 95 % interval contains 1",
    SUSPECT: "a run of this cell had its generator overloaded while this step was measured (the per-run "
             "report says GENERATOR OVERLOADED): the numbers may be the generator's, not the server's; the "
             "verdict it would have had is kept as verdict_if_trusted",
}


def _interval(reps: np.ndarray) -> list[float] | None:
    r = reps[np.isfinite(reps) & (reps > 0)]
    if r.size < 10:
        return None
    a = (1.0 - LEVEL) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return [float(lo), float(hi)]


def combine_rounds(points: list[float], reps: list[np.ndarray], rng: np.random.Generator) -> dict[str, Any]:
    """Combine per-round ratios (points and within-run replicate arrays) over rounds.

    Returns the geometric-mean point, the hierarchical-bootstrap 95 % interval, the per-round
    intervals and whether the rounds disagree (per-round intervals not all overlapping).
    """
    per_round = [_interval(r) for r in reps]
    logs = np.log(np.vstack([np.where(r > 0, r, np.nan) for r in reps]))  # (R, B)
    n_rounds, n_boot = logs.shape
    pick = rng.integers(0, n_rounds, size=(n_boot, n_rounds))
    drawn = logs[pick, np.arange(n_boot)[:, None]]
    with np.errstate(invalid="ignore"):  # a replicate whose drawn ratios are all undefined stays NaN
        combined = np.exp(np.nansum(drawn, axis=1) / np.sum(~np.isnan(drawn), axis=1))
    known = [iv for iv in per_round if iv is not None]
    disagree = len(known) >= 2 and max(iv[0] for iv in known) > min(iv[1] for iv in known)
    return {"point": float(math.exp(np.mean(np.log(points)))), "ci": _interval(combined),
            "per_round": [float(p) for p in points], "per_round_ci": per_round, "rounds_disagree": bool(disagree)}


def verdict_of(comb: dict[str, Any] | None, rounds: int, enough: bool) -> str:
    """The plain-words verdict of a combined speedup (rules in :data:`VERDICT_RULES`)."""
    if not enough or comb is None or comb["ci"] is None:
        return "not enough samples"
    if comb["rounds_disagree"]:
        return "not reproducible: rounds disagree"
    lo, hi = comb["ci"]
    if lo > 1.0:
        return "faster, reproducible" if rounds >= 2 else "faster (one round: reproducibility not tested)"
    if hi < 1.0:
        return "slower"
    return "no significant change"


def ratio_pair(cand: list[Cell], base: list[Cell], attr: str, reps_attr: str, rng: np.random.Generator
               ) -> dict[str, Any] | None:
    """Candidate / baseline of a cell attribute and its replicates, combined over rounds;
    ``None`` when a round lacks either side's value or replicates."""
    points, reps = [], []
    for c, b in zip(cand, base):
        pc, pb = getattr(c, attr), getattr(b, attr)
        rc, rb = getattr(c, reps_attr), getattr(b, reps_attr)
        if not pc or not pb or rc is None or rb is None:
            return None
        points.append(pc / pb)
        with np.errstate(divide="ignore", invalid="ignore"):
            reps.append(rc / rb)
    return combine_rounds(points, reps, rng)


def latency_ratio(cand: list[Cell], base: list[Cell], metric: str, p: float, rng: np.random.Generator,
                  n_boot: int) -> tuple[dict[str, Any] | None, bool]:
    """Combined ratio of a latency percentile; (None, True) when some run has too few samples."""
    need = min_samples_for(p)
    points, reps = [], []
    for c, b in zip(cand, base):
        (nc, vc), (nb, vb) = c.lat[metric], b.lat[metric]
        if nc < need or nb < need:
            return None, True
        pc, pb = percentiles_sorted(vc, [p])[0], percentiles_sorted(vb, [p])[0]
        if not pb:
            return None, False
        points.append(float(pc / pb))
        with np.errstate(divide="ignore", invalid="ignore"):
            reps.append(bootstrap_percentiles(vc, [p], n_boot, rng)[0] / bootstrap_percentiles(vb, [p], n_boot, rng)[0])
    return combine_rounds(points, reps, rng), False


def mean(xs: list[float | None]) -> float | None:
    """The mean of the known values; ``None`` when none is known."""
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def histogram(hists: list[dict[int, int]]) -> list[dict[str, int]]:
    """Tokens-per-chunk histograms summed over rounds: the distribution of tokens emitted per step."""
    total: dict[int, int] = {}
    for h in hists:
        for k, v in h.items():
            total[k] = total.get(k, 0) + v
    return [{"tokens_per_step_count": k, "chunks_count": total[k]} for k in sorted(total)]


def cv(values: list[float | None]) -> float | None:
    """Coefficient of variation across rounds (sample sd / mean); ``None`` below two rounds."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size < 2 or not np.mean(v):
        return None
    return float(np.std(v, ddof=1) / np.mean(v))
