"""Figures as PNG bytes (matplotlib, Agg backend, imported lazily inside each function).

Every function takes already computed data (summary dicts or raw arrays from a run) and
returns ``bytes`` of a PNG, or ``None`` when there is nothing to draw. Raw distributions are
downsampled for drawing only (a fixed grid of quantiles plus a denser, log-spaced tail), so a
CDF of a million requests costs a few thousand points; the numbers in tables are exact.
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.step_windows import Window

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _plt() -> Any:
    import matplotlib  # matplotlib: only when a chart is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a chart is drawn

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def cdf_points(values: np.ndarray, n_points: int = 800) -> tuple[np.ndarray, np.ndarray]:
    """Downsampled empirical CDF ``(x, F(x))`` of raw values, dense in the upper tail."""
    x = np.sort(values[~np.isnan(values)])
    n = x.size
    if n == 0:
        return x, x
    body = np.linspace(0, n - 1, min(n, n_points))
    tail = n - np.unique(np.logspace(0, np.log10(max(n, 1)), min(n, n_points)).astype(np.int64))
    idx = np.unique(np.clip(np.concatenate([body.astype(np.int64), tail]), 0, n - 1))
    return x[idx], (idx + 1) / n


def latency_distributions(
    series: Sequence[tuple[str, np.ndarray]], metric_label: str, title: str
) -> bytes | None:
    """CDF (linear) and CCDF (log-scale tail) side by side, one line per labelled series."""
    series = [(label, v) for label, v in series if np.isfinite(v).any()]
    if not series:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (label, v) in enumerate(series):
        x, f = cdf_points(v)
        c = _COLORS[i % len(_COLORS)]
        ax1.plot(x, f, color=c, label=f"{label} (n={np.isfinite(v).sum()})")
        n = np.isfinite(v).sum()
        ccdf = 1.0 - f + 1.0 / n  # P(X >= x): positive down to the maximum, so it fits a log axis
        ax2.plot(x, ccdf, color=c)
    ax1.set_xlabel(metric_label)
    ax1.set_ylabel("CDF")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.set_yscale("log")
    ax2.set_xlabel(metric_label)
    ax2.set_ylabel("CCDF P(X >= x), log scale")
    ax2.grid(alpha=0.3, which="both")
    fig.suptitle(title + " (successful requests; failures excluded, see tables)")
    return _png(fig)


def run_distributions(run: Run, wins: list[Window], column: str, label: str, by: str) -> bytes | None:
    """Distribution of one per-request metric, lines per task (pooled steps) or per step (all tasks)."""
    d = derived(run)
    values = run[column] if column in run.columns else d[column]
    ok = d["ok"]
    series: list[tuple[str, np.ndarray]] = []
    if by == "task":
        steady = np.zeros(len(run), dtype=bool)
        for w in wins:
            steady |= w.mask
        for code, task in enumerate(run.categories["task"]):
            sel = steady & ok & (run["task"] == code)
            if sel.any():
                series.append((task, values[sel]))
        title = f"{label} by task (steady windows of all steps)"
    else:
        for w in wins:
            sel = w.mask & ok
            if sel.any():
                series.append((f"step {w.name}", values[sel]))
        title = f"{label} by step (all tasks)"
    return latency_distributions(series, label, title)


def _xy(points: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in points:
        if p.get(key) is not None and p.get("load_value") is not None:
            xs.append(p["load_value"])
            ys.append(p[key])
    return xs, ys


def _xlabel(points: list[dict[str, Any]]) -> str:
    kinds = {p.get("step_kind") for p in points}
    return "offered rate (requests/s)" if kinds == {"rate"} else "concurrency (users)" if kinds == {"concurrency"} else "load"


def percentiles_vs_load(curves_by_run: dict[str, list[dict[str, Any]]]) -> bytes | None:
    """TTFT, TPOT and E2E percentiles vs load (one line style per run when comparing)."""
    pts_all = [p for pts in curves_by_run.values() for p in pts]
    if len(pts_all) < 2:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, metric in zip(axes, (names.TTFT, names.TPOT, names.E2E)):
        for r, (run_label, pts) in enumerate(curves_by_run.items()):
            for i, p in enumerate(("p50", "p95", "p99")):
                xs, ys = _xy(pts, metric.key(p))
                if xs:
                    ax.plot(xs, ys, marker="o", linestyle=("-", "--")[r % 2], color=_COLORS[i],
                            label=f"{run_label} {p}" if len(curves_by_run) > 1 else p)
        ax.set_title(f"{metric.name.upper()} ({metric.unit})")
        ax.set_xlabel(_xlabel(pts_all))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _png(fig)


def throughput_vs_load(curves_by_run: dict[str, list[dict[str, Any]]]) -> bytes | None:
    """Output tokens/s (and goodput) vs load; per-request tokens/s on the right."""
    pts_all = [p for pts in curves_by_run.values() for p in pts]
    if len(pts_all) < 2:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for r, (run_label, pts) in enumerate(curves_by_run.items()):
        xs, ys = _xy(pts, names.OUTPUT_TOKENS_PER_S)
        ax1.plot(xs, ys, marker="o", color=_COLORS[r], label=f"{run_label} output tokens/s")
        xs, ys = _xy(pts, names.REQUEST_OUTPUT_TPS_P50_TOKENS_PER_S)
        ax2.plot(xs, ys, marker="o", color=_COLORS[r], label=f"{run_label} p50")
        xs, ys = _xy(pts, names.REQUEST_OUTPUT_TPS_MEAN_TOKENS_PER_S)
        ax2.plot(xs, ys, marker="x", linestyle=":", color=_COLORS[r], label=f"{run_label} mean")
    ax1.set_xlabel(_xlabel(pts_all))
    ax1.set_ylabel("aggregate output tokens/s")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.set_xlabel(_xlabel(pts_all))
    ax2.set_ylabel("per-request output tokens/s")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    return _png(fig)


def latency_vs_throughput(curves_by_run: dict[str, list[dict[str, Any]]], latency_key: str = names.E2E_P95_MS) -> bytes | None:
    """The Pareto view: latency vs aggregate throughput, points labelled with their load."""
    pts_all = [p for pts in curves_by_run.values() for p in pts]
    if len(pts_all) < 2:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r, (run_label, pts) in enumerate(curves_by_run.items()):
        good = [p for p in pts if p.get(names.OUTPUT_TOKENS_PER_S) is not None and p.get(latency_key) is not None]
        ax.plot([p[names.OUTPUT_TOKENS_PER_S] for p in good], [p[latency_key] for p in good], marker="o",
                color=_COLORS[r], label=run_label)
        for p in good:
            ax.annotate(f"{p['load_value']:g}", (p[names.OUTPUT_TOKENS_PER_S], p[latency_key]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("aggregate output tokens/s")
    ax.set_ylabel(latency_key.replace("_", " "))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("latency vs throughput (labels: load)")
    return _png(fig)


def tokens_per_chunk(rows: list[dict[str, Any]]) -> bytes | None:
    """Histogram of tokens per chunk (first chunk excluded) per step, all tasks."""
    rows = [r for r in rows if r["task"] == "all" and r.get("tokens_per_chunk_histogram")]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        h = r["tokens_per_chunk_histogram"]
        total = sum(b["chunks_count"] for b in h)
        xs = np.array([b["chunk_size_tokens"] for b in h]) + (i - len(rows) / 2) * width
        ax.bar(xs, [b["chunks_count"] / total for b in h], width=width, color=_COLORS[i % len(_COLORS)],
               label=f"step {r['step_name']} (mean {r['chunk_mean_tokens_per_chunk_tokens']:.2f})")
    ax.set_xlabel("tokens per chunk (first chunk excluded)")
    ax.set_ylabel("share of chunks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def soak_series(windows: list[dict[str, Any]]) -> bytes | None:
    """Time series of a soak: throughput, TTFT, TPOT, error rate, server queue and KV use."""
    if len(windows) < 2:
        return None
    plt = _plt()
    t = [w["window_offset_s"] / 60.0 for w in windows]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6), sharex=True)
    panels = [
        ("output tokens/s", [(names.OUTPUT_TOKENS_PER_S, "")]),
        ("TTFT (ms)", [(names.TTFT_P50_MS, "p50"), (names.TTFT_P99_MS, "p99")]),
        ("TPOT (ms)", [(names.TPOT_P50_MS, "p50"), (names.TPOT_P99_MS, "p99")]),
        ("error rate", [(names.ERROR_RATE, "")]),
        ("server queue (waiting)", [("server_queue_waiting_mean_count", "mean"), ("server_queue_waiting_max_count", "max")]),
        ("KV-cache use", [("server_kv_cache_usage_mean_perc", "mean"), ("server_kv_cache_usage_max_perc", "max")]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels):
        for i, (k, label) in enumerate(keys):
            ys = [np.nan if w.get(k) is None else w[k] for w in windows]
            ax.plot(t, ys, marker=".", color=_COLORS[i], label=label or None)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if any(label for _, label in keys):
            ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("minutes since start")
    return _png(fig)


def compare_distributions(base: Run, cand: Run, wa: Window, wb: Window, column: str, label: str) -> bytes | None:
    """Baseline vs candidate CDF/CCDF overlay of one metric in one matched step."""
    da, db = derived(base), derived(cand)
    va = (base[column] if column in base.columns else da[column])[wa.mask & da["ok"]]
    vb = (cand[column] if column in cand.columns else db[column])[wb.mask & db["ok"]]
    return latency_distributions([("baseline", va), ("candidate", vb)], label, f"{label}, step {wb.name}")


def resources_vs_load(rows: list[dict[str, Any]]) -> bytes | None:
    """GPU memory, utilisation, power and tokens per joule against the step load (``resources.rows``)."""
    pts = [r for r in rows if (r.get("step_concurrency_users") or r.get("step_rate_rps")) is not None
           and r.get("gpu_power_w_mean") is not None]
    if not pts:
        return None
    x = [r.get("step_concurrency_users") or r.get("step_rate_rps") for r in pts]
    plt = _plt()
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    panels = (("gpu_memory_used_mib_mean", "GPU memory used (MiB)"), ("gpu_utilization_mean", "GPU utilisation (0-1)"),
              ("gpu_power_w_mean", "power per GPU (W)"), ("output_tokens_per_joule", "output tokens per joule"))
    for ax, (key, label) in zip(axes, panels):
        ax.plot(x, [r.get(key) if r.get(key) is not None else np.nan for r in pts], "o-", color=_COLORS[0])
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(x)
        ax.set_xticklabels([f"{v:g}" for v in x])
        ax.set_xlabel("users" if pts[0].get("step_concurrency_users") is not None else "offered req/s")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    return _png(fig)


def gpu_over_time(gpu: Any) -> bytes | None:
    """Memory used and power of every GPU over the run (``Run.gpu_metrics``): the soak view's server side."""
    if gpu is None or not gpu.gpus:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.2))
    t0 = min(float(g.scraped_at_s[0]) for g in gpu.gpus)
    for i, g in enumerate(gpu.gpus):
        t = (g.scraped_at_s - t0) / 60.0
        for ax, fld in ((ax1, "memory_used_mib"), (ax2, "power_w")):
            v = g.get(fld)
            if v is not None:
                ax.plot(t, v, color=_COLORS[i % len(_COLORS)], label=f"GPU {g.gpu} ({g.source})")
    ax1.set_title("GPU memory used (MiB)", fontsize=9)
    ax2.set_title("power (W)", fontsize=9)
    for ax in (ax1, ax2):
        ax.set_xlabel("minutes since the first scrape")
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    return _png(fig)
