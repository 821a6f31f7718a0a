"""The target's Prometheus scrapes (``server_metrics.jsonl``) as per-metric series.

:func:`read_server_metrics` reduces every scrape of one source to one number per metric name
and returns them, ordered by scrape time, as a :class:`ServerMetrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.loader.lines import _iter_json

#: Per-position acceptance counters (vLLM, llama.cpp's speculative build), kept by ``position``.
PER_POS_NAMES = frozenset({"vllm:spec_decode_num_accepted_tokens_per_pos_total",
                           "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"})


@dataclass
class ServerMetrics:
    """Prometheus scrapes of one source, reduced to one number per metric name per scrape.

    Counters and gauges are summed over label sets (``engine``, ``model_name`` ...) except
    names ending in ``_perc`` (fractions such as KV-cache use), which are averaged. ``_created``
    series are dropped. ``per_pos`` keeps the ``position`` label of
    the per-position acceptance counters (:data:`PER_POS_NAMES`) apart (summed over engines).
    """

    scraped_at_s: np.ndarray
    step: np.ndarray
    series: dict[str, np.ndarray]
    per_pos: dict[int, np.ndarray]
    source: str = "target"

    def value(self, name: str) -> np.ndarray | None:
        """Values of one metric per scrape (NaN where a scrape lacked it), or ``None``."""
        return self.series.get(name)


def read_server_metrics(path: Path, warnings: list[str], source: str = "target") -> ServerMetrics | None:
    """Reduce ``server_metrics.jsonl`` scrapes of ``source`` to per-name series (see class doc)."""
    if not path.is_file():
        return None
    times: list[float] = []
    steps: list[float | None] = []
    rows: list[dict[str, float]] = []
    pos_rows: list[dict[int, float]] = []
    per_pos_names = PER_POS_NAMES
    for lineno, obj in _iter_json(path, warnings):
        if obj.get("source", "target") != source or obj.get("error"):
            continue
        try:
            t = float(obj["scraped_at"])
        except (KeyError, TypeError, ValueError):
            raise RunInputError(f"{path}:{lineno}: missing or non-numeric 'scraped_at'") from None
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        pos: dict[int, float] = {}
        for s in obj.get("samples") or ():
            name = s.get("name")
            value = s.get("value")
            if not name or value is None or name.endswith("_created"):
                continue
            if name in per_pos_names:
                p = int((s.get("labels") or {}).get("position", -1))
                pos[p] = pos.get(p, 0.0) + float(value)
                continue
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1
        for name in sums:
            if name.endswith("_perc"):
                sums[name] /= counts[name]
        times.append(t)
        steps.append(obj.get("step"))
        rows.append(sums)
        pos_rows.append(pos)
    if not times:
        return None
    order = np.argsort(np.array(times), kind="stable")
    names = sorted({n for r in rows for n in r})
    series = {n: np.array([rows[i].get(n, np.nan) for i in order]) for n in names}
    positions = sorted({p for r in pos_rows for p in r})
    per_pos = {p: np.array([pos_rows[i].get(p, np.nan) for i in order]) for p in positions}
    return ServerMetrics(
        scraped_at_s=np.array(times)[order],
        step=np.array(steps, dtype=np.float64)[order],
        series=series,
        per_pos=per_pos,
        source=source,
    )
