"""What was sent: prompt and output token distributions per task, and requested vs server-counted sizes.

From the successful records of the steady windows (``prompt_tokens`` and ``output_tokens``
as the server counted them, ``max_tokens`` as requested), per task: count, p50/p90/p99/max and
mean. The requested prompt length is the mean of the scenario's ``prompt_tokens`` (or
``document_tokens``) distribution for the task, as the manifest's scenario echo states it; for multi-turn tasks only first turns are
compared (later turns carry the history). ``prompt_ratio`` = server-counted mean / requested
mean; a ratio off by more than 25 % *and* 32 tokens (a chat template adds a few dozen) is
flagged: the prompts were sized with a tokenizer that is not the server's. A task whose prompts
come from a ``dataset`` is sent as the file has it, not sized: it has no requested length, so
nothing to compare and nothing to flag (its server-counted sizes are still shown). No I/O here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.stats import percentiles_sorted
from tokenswarm.analysis.step_windows import Window
from tokenswarm.manifest import RunManifest

#: Relative and absolute mismatch beyond which prompt sizing is called wrong.
SIZING_RATIO_LIMIT = 0.25
SIZING_TOKENS_SLACK = 32.0


def _dist(x: np.ndarray, prefix: str) -> dict[str, Any]:
    x = np.sort(x[~np.isnan(x)])
    if not x.size:
        return {f"{prefix}_p50_tokens": None, f"{prefix}_p90_tokens": None, f"{prefix}_p99_tokens": None,
                f"{prefix}_max_tokens": None, f"{prefix}_mean_tokens": None}
    p50, p90, p99 = percentiles_sorted(x, (50.0, 90.0, 99.0))
    return {f"{prefix}_p50_tokens": float(p50), f"{prefix}_p90_tokens": float(p90), f"{prefix}_p99_tokens": float(p99),
            f"{prefix}_max_tokens": float(x[-1]), f"{prefix}_mean_tokens": float(x.mean())}


def requested_prompt_mean(manifest: RunManifest, task: str) -> float | None:
    """Nominal mean of the scenario's prompt-length distribution for ``task``, as the manifest says.

    The scenario echo carries it (``traffic.classes.<task>.requested_mean_tokens.prompt_tokens``,
    written from format version 3), so the analysis needs none of the generator's distribution
    code. ``None`` when the task's prompts are not sized by tokens (a ``dataset`` task: its
    prompts are sent as they are) and for runs written before the echo carried the means.
    """
    classes = (manifest.scenario_dict.get("traffic") or {}).get("classes") or {}
    if isinstance(classes, list):
        classes = {c.get("name"): c for c in classes if isinstance(c, dict)}
    cfg = classes.get(task) if isinstance(classes, dict) else None
    if not isinstance(cfg, dict) or cfg.get("dataset"):
        return None
    means = cfg.get("requested_mean_tokens")
    value = means.get("prompt_tokens") if isinstance(means, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def what_was_sent(run: Any, wins: list[Window]) -> list[dict[str, Any]]:
    """One row per task over all steady windows (see the module docstring)."""
    d = derived(run)
    steady = np.zeros(len(run), dtype=bool)
    for w in wins:
        steady |= w.mask
    ok = steady & d["ok"]
    tasks = run.categories["task"]
    turn = run["turn"] if "turn" in run.columns else None
    out = []
    for code in sorted(np.unique(run["task"][ok]), key=lambda c: tasks[c] if c >= 0 else ""):
        if code < 0:
            continue
        name = tasks[code]
        sel = ok & (run["task"] == code)
        row: dict[str, Any] = {"task": name, "requests_count": int(sel.sum())}
        row.update(_dist(run["prompt_tokens"][sel].astype(np.float64), "prompt"))
        row.update(_dist(run["output_tokens"][sel].astype(np.float64), "output"))
        mt = run["max_tokens"][sel].astype(np.float64) if "max_tokens" in run.columns else np.array([])
        row["max_tokens_mean_tokens"] = float(np.nanmean(mt)) if mt.size and not np.isnan(mt).all() else None
        requested = requested_prompt_mean(run.manifest, name)
        # later turns carry the history: compare first turns only (NaN turn: a single-turn task)
        first = sel if turn is None else sel & ~(turn > 0)
        counted = run["prompt_tokens"][first].astype(np.float64)
        counted = counted[~np.isnan(counted)]
        row["requested_prompt_mean_tokens"] = requested
        row["counted_prompt_mean_tokens"] = float(counted.mean()) if counted.size else None
        ratio = row["counted_prompt_mean_tokens"] / requested if requested and counted.size else None
        row["prompt_counted_to_requested_ratio"] = ratio
        row["prompt_sizing_suspect"] = bool(
            ratio is not None and abs(ratio - 1.0) > SIZING_RATIO_LIMIT
            and abs(row["counted_prompt_mean_tokens"] - requested) > SIZING_TOKENS_SLACK)
        out.append(row)
    return out
