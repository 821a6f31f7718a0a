"""GPU exporter metrics (NVIDIA DCGM exporter, AMD device-metrics exporter) as per-GPU series.

A scrape source is a GPU endpoint when its samples carry one of the names below: it is
recognised by its metrics, not by a flag, so a scenario just lists the exporter among its
``extra_metrics`` (any name). Every field is brought to one unit:

==================  ==========================================  ===============================
field               NVIDIA DCGM exporter                        AMD device-metrics exporter
==================  ==========================================  ===============================
memory_used_mib     ``DCGM_FI_DEV_FB_USED`` (MiB)               ``GPU_USED_VRAM`` (MB)
memory_free_mib     ``DCGM_FI_DEV_FB_FREE`` (MiB)               ``GPU_FREE_VRAM`` (MB)
memory_total_mib    FB_USED + FB_FREE                           ``GPU_TOTAL_VRAM`` (MB)
utilization         ``DCGM_FI_DEV_GPU_UTIL`` (% -> 0..1)        ``GPU_GFX_ACTIVITY`` (% -> 0..1)
sm_active           ``DCGM_FI_PROF_SM_ACTIVE`` (0..1)           --
power_w             ``DCGM_FI_DEV_POWER_USAGE`` (W)             ``GPU_POWER_USAGE``, ``GPU_PACKAGE_POWER`` (W)
energy_j            ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``    ``GPU_ENERGY_CONSUMED`` (uJ -> J)
                    (mJ -> J)
temperature_c       ``DCGM_FI_DEV_GPU_TEMP``                    ``GPU_JUNCTION_TEMPERATURE``, ``GPU_EDGE_TEMPERATURE``
sm_clock_mhz        ``DCGM_FI_DEV_SM_CLOCK``                    ``GPU_CLOCK{clock_type="GPU_CLOCK_TYPE_SYSTEM"}``
==================  ==========================================  ===============================

Names are matched case-insensitively (the AMD exporter writes them in lower case), with or
without the ``_total`` that prometheus_client's parser appends to counter samples. AMD's
"MB" is taken as MiB (amd-smi reports VRAM in 2^20-byte units). A GPU is identified by its
source plus its ``gpu`` / ``gpu_id`` label (``UUID`` when present). Functions here are pure;
:func:`read_gpu_metrics` is the only one that reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

#: field -> ((metric name in upper case, scale to the field's unit, vendor), ...), first found wins.
GPU_METRICS: dict[str, tuple[tuple[str, float, str], ...]] = {
    "memory_used_mib": (("DCGM_FI_DEV_FB_USED", 1.0, "nvidia"), ("GPU_USED_VRAM", 1.0, "amd")),
    "memory_free_mib": (("DCGM_FI_DEV_FB_FREE", 1.0, "nvidia"), ("GPU_FREE_VRAM", 1.0, "amd")),
    "memory_total_mib": (("GPU_TOTAL_VRAM", 1.0, "amd"),),
    "utilization": (("DCGM_FI_DEV_GPU_UTIL", 0.01, "nvidia"), ("GPU_GFX_ACTIVITY", 0.01, "amd")),
    "sm_active": (("DCGM_FI_PROF_SM_ACTIVE", 1.0, "nvidia"),),
    "power_w": (("DCGM_FI_DEV_POWER_USAGE", 1.0, "nvidia"), ("GPU_POWER_USAGE", 1.0, "amd"),
                ("GPU_PACKAGE_POWER", 1.0, "amd")),
    "energy_j": (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3, "nvidia"), ("GPU_ENERGY_CONSUMED", 1e-6, "amd")),
    "temperature_c": (("DCGM_FI_DEV_GPU_TEMP", 1.0, "nvidia"), ("GPU_JUNCTION_TEMPERATURE", 1.0, "amd"),
                      ("GPU_EDGE_TEMPERATURE", 1.0, "amd")),
    "sm_clock_mhz": (("DCGM_FI_DEV_SM_CLOCK", 1.0, "nvidia"), ("GPU_CLOCK", 1.0, "amd")),
}
GPU_FIELDS: tuple[str, ...] = tuple(GPU_METRICS)
_BY_NAME: dict[str, tuple[str, float, str, int]] = {
    name: (fld, scale, vendor, rank)
    for fld, names in GPU_METRICS.items() for rank, (name, scale, vendor) in enumerate(names)
}
_ID_LABELS = ("UUID", "uuid", "gpu", "gpu_id", "device", "card")


def _lookup(name: str) -> tuple[str, float, str, int] | None:
    up = name.upper()
    hit = _BY_NAME.get(up)
    if hit is None and up.endswith("_TOTAL"):
        # prometheus_client's parser names counter samples NAME_total (DCGM's energy counter)
        hit = _BY_NAME.get(up[:-6])
    return hit


def is_gpu_metric(name: str) -> bool:
    """True for a metric name of a known GPU exporter."""
    return _lookup(name) is not None


def _gpu_key(labels: dict[str, Any]) -> str:
    for lab in _ID_LABELS:
        v = labels.get(lab)
        if v not in (None, ""):
            return str(v)
    return "0"


def _gpu_index(labels: dict[str, Any]) -> str:
    for lab in ("gpu", "gpu_id", "device", "UUID"):
        v = labels.get(lab)
        if v not in (None, ""):
            return str(v)
    return "0"


def gpu_readings(samples: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One scrape's samples -> ``{gpu key: {field: value, "gpu": index, "model": name, "vendor": ...}}``.

    ``samples`` are ``{"name", "labels", "value"}`` dicts (:func:`tokenswarm.collect.scrape.parse_metrics`).
    Non-GPU samples are ignored; an empty dict means the scrape is not a GPU exporter's.
    """
    out: dict[str, dict[str, Any]] = {}
    ranks: dict[tuple[str, str], int] = {}
    for s in samples:
        hit = _lookup(str(s.get("name", "")))
        if hit is None or s.get("value") is None:
            continue
        fld, scale, vendor, rank = hit
        labels = s.get("labels") or {}
        if fld == "sm_clock_mhz" and vendor == "amd" and labels.get("clock_type", "GPU_CLOCK_TYPE_SYSTEM") != "GPU_CLOCK_TYPE_SYSTEM":
            continue  # GPU_CLOCK also reports memory, video and data-fabric clocks
        key = _gpu_key(labels)
        g = out.setdefault(key, {"gpu": _gpu_index(labels), "model": labels.get("modelName") or labels.get("card_model"),
                                 "vendor": vendor, "metrics": set()})
        if ranks.get((key, fld), 99) < rank:
            continue
        ranks[(key, fld)] = rank
        g[fld] = float(s["value"]) * scale
        g["metrics"].add(str(s["name"]))
    for g in out.values():
        if "memory_total_mib" not in g and "memory_used_mib" in g and "memory_free_mib" in g:
            g["memory_total_mib"] = g["memory_used_mib"] + g["memory_free_mib"]
    return out


@dataclass
class GpuSeries:
    """Readings of one GPU, one element per scrape (NaN where a scrape lacked the field)."""

    source: str
    gpu: str
    model: str | None
    vendor: str
    scraped_at_s: np.ndarray
    values: dict[str, np.ndarray]

    def get(self, fld: str) -> np.ndarray | None:
        """Values of one field, or ``None`` when the exporter never sent it."""
        v = self.values.get(fld)
        return None if v is None or np.isnan(v).all() else v


@dataclass
class GpuMetrics:
    """Every GPU seen in ``server_metrics.jsonl`` (all sources), and the exporter names found."""

    gpus: list[GpuSeries]
    metric_names: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def gpu_metrics_from_lines(lines: Iterable[dict[str, Any]]) -> GpuMetrics | None:
    """Build :class:`GpuMetrics` from decoded ``server_metrics.jsonl`` lines; ``None`` if no GPU metric."""
    rows: dict[tuple[str, str], list[tuple[float, dict[str, Any]]]] = {}
    names: set[str] = set()
    for obj in lines:
        if obj.get("error"):
            continue
        try:
            t = float(obj["scraped_at"])
        except (KeyError, TypeError, ValueError):
            continue
        source = str(obj.get("source", "target"))
        for key, g in gpu_readings(obj.get("samples") or ()).items():
            names |= g["metrics"]
            rows.setdefault((source, key), []).append((t, g))
    if not rows:
        return None
    gpus = []
    for (source, _key), readings in sorted(rows.items()):
        readings.sort(key=lambda r: r[0])
        first = readings[0][1]
        gpus.append(GpuSeries(
            source=source, gpu=first["gpu"], model=first["model"], vendor=first["vendor"],
            scraped_at_s=np.array([t for t, _ in readings]),
            values={f: np.array([g.get(f, np.nan) for _, g in readings], dtype=np.float64) for f in GPU_FIELDS},
        ))
    return GpuMetrics(gpus=gpus, metric_names=sorted(names), sources=sorted({g.source for g in gpus}))


def window_stats(g: GpuSeries, start_s: float, end_s: float) -> dict[str, float | None]:
    """Mean/max of one GPU's gauges over the scrapes inside ``[start_s, end_s]`` and its energy.

    Energy comes from the energy counter when the exporter has one: its increase between the
    scrapes bracketing the window, scaled to the window's length (scrape spacing makes the
    bracket a little wider); otherwise mean power x window length. ``energy_source`` says which.
    """
    t = g.scraped_at_s
    inside = (t >= start_s) & (t <= end_s)
    out: dict[str, Any] = {}

    def agg(fld: str, fn: Any) -> float | None:
        v = g.get(fld)
        if v is None or not inside.any():
            return None
        x = v[inside]
        x = x[~np.isnan(x)]
        return float(fn(x)) if x.size else None

    out["memory_used_mib_mean"] = agg("memory_used_mib", np.mean)
    out["memory_used_mib_max"] = agg("memory_used_mib", np.max)
    out["memory_total_mib"] = agg("memory_total_mib", np.max)
    out["utilization_mean"] = agg("utilization", np.mean)
    out["sm_active_mean"] = agg("sm_active", np.mean)
    out["power_w_mean"] = agg("power_w", np.mean)
    out["power_w_max"] = agg("power_w", np.max)
    out["temperature_c_max"] = agg("temperature_c", np.max)
    out["sm_clock_mhz_mean"] = agg("sm_clock_mhz", np.mean)
    out["scrapes_count"] = int(inside.sum())
    energy = g.get("energy_j")
    out["energy_j"] = None
    out["energy_source"] = None
    duration = end_s - start_s
    if energy is not None and duration > 0:
        have = ~np.isnan(energy)
        before = np.nonzero(have & (t <= start_s))[0]
        after = np.nonzero(have & (t >= end_s))[0]
        if before.size and after.size:
            i0, i1 = int(before[-1]), int(after[0])
            d = float(energy[i1] - energy[i0])
            span = float(t[i1] - t[i0])
            if d >= 0 and span > 0:
                out["energy_j"] = d * duration / span
                out["energy_source"] = "energy counter"
    if out["energy_j"] is None and out["power_w_mean"] is not None and duration > 0:
        out["energy_j"] = out["power_w_mean"] * duration
        out["energy_source"] = "mean power x window"
    return out
