"""Write a report directory: summary.json, CSV tables, PNG plots, report.md, report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import orjson

from tokenswarm.analysis import plots, render_csv
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.render_compare import compare_doc
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.analysis.render_html import to_html
from tokenswarm.analysis.render_md import to_markdown
from tokenswarm.analysis.step_windows import windows
from tokenswarm.redact import redact


def _safe(images: dict[str, bytes], name: str, fn: Callable[[], bytes | None], warnings: list[str]) -> None:
    # A plot that cannot be drawn must not cost the user the numbers.
    try:
        png = fn()
    except Exception as exc:
        warnings.append(f"plot {name} failed: {exc!r}")
        return
    if png:
        images[name] = png


def report_images(run: Run, s: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """All figures of a single-run report."""
    images: dict[str, bytes] = {}
    warn: list[str] = []
    wins, _ = windows(run)
    pts = {run.name: s["curves"]["points"]}
    _safe(images, "throughput_vs_load", lambda: plots.throughput_vs_load(pts), warn)
    _safe(images, "percentiles_vs_load", lambda: plots.percentiles_vs_load(pts), warn)
    _safe(images, "latency_vs_throughput", lambda: plots.latency_vs_throughput(pts), warn)
    _safe(images, "ttft_by_task", lambda: plots.run_distributions(run, wins, "ttft_ms", "TTFT (ms)", "task"), warn)
    _safe(images, "e2e_by_task", lambda: plots.run_distributions(run, wins, "e2e_ms", "E2E (ms)", "task"), warn)
    _safe(images, "tpot_by_task", lambda: plots.run_distributions(run, wins, "tpot_ms", "TPOT (ms)", "task"), warn)
    if len(wins) > 1:
        _safe(images, "ttft_by_step", lambda: plots.run_distributions(run, wins, "ttft_ms", "TTFT (ms)", "step"), warn)
    _safe(images, "tokens_per_chunk", lambda: plots.tokens_per_chunk(s["spec_decode"]["rows"]), warn)
    if s["soak"]["applicable"]:
        _safe(images, "soak", lambda: plots.soak_series(s["soak"]["windows"]), warn)
        _safe(images, "gpu_over_time", lambda: plots.gpu_over_time(getattr(run, "gpu_metrics", None)), warn)
    if s.get("resources"):
        _safe(images, "resources_vs_load", lambda: plots.resources_vs_load(s["resources"]["rows"]), warn)
    return images, warn


def compare_images(base: Run, cand: Run, s: dict[str, Any], base_points: list[Any], cand_points: list[Any]) -> tuple[dict[str, bytes], list[str]]:
    """Baseline-vs-candidate overlays."""
    images: dict[str, bytes] = {}
    warn: list[str] = []
    pts = {"baseline": base_points, "candidate": cand_points}
    _safe(images, "throughput_vs_load", lambda: plots.throughput_vs_load(pts), warn)
    _safe(images, "percentiles_vs_load", lambda: plots.percentiles_vs_load(pts), warn)
    _safe(images, "latency_vs_throughput", lambda: plots.latency_vs_throughput(pts), warn)
    wa, _ = windows(base)
    wb, _ = windows(cand)
    # Overlay the highest matched load step (where a difference matters most).
    by_target = {(w.kind, w.target): w for w in wa}
    pair = next(((by_target[(w.kind, w.target)], w) for w in reversed(wb) if (w.kind, w.target) in by_target), None)
    if pair is None and wa and wb:
        pair = (wa[-1], wb[-1])
    if pair:
        _safe(images, "ttft_overlay", lambda: plots.compare_distributions(base, cand, *pair, "ttft_ms", "TTFT (ms)"), warn)
        _safe(images, "e2e_overlay", lambda: plots.compare_distributions(base, cand, *pair, "e2e_ms", "E2E (ms)"), warn)
    return images, warn


def write_outputs(out_dir: Path, summary: dict[str, Any], blocks: list[Any], images: dict[str, bytes],
                  tables: dict[str, list[dict[str, Any]]], title: str) -> dict[str, Path]:
    """Write every artefact; returns name -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    p = out_dir / "summary.json"
    p.write_bytes(redact(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)))
    files["summary.json"] = p
    for path in render_csv.write_tables(out_dir, tables):
        files[path.name] = path
    image_paths = {}
    if images:
        (out_dir / "plots").mkdir(exist_ok=True)
        for name, png in images.items():
            ip = out_dir / "plots" / f"{name}.png"
            ip.write_bytes(png)
            image_paths[name] = f"plots/{name}.png"
    p = out_dir / "report.md"
    p.write_text(redact(to_markdown(blocks, image_paths)))
    files["report.md"] = p
    p = out_dir / "report.html"
    p.write_text(redact(to_html(blocks, images, title)))
    files["report.html"] = p
    return files


def write_report(run: Run, summary: dict[str, Any], out_dir: Path, with_plots: bool = True) -> dict[str, Path]:
    """Write the single-run report directory."""
    images, warn = report_images(run, summary) if with_plots else ({}, [])
    summary["generator_health"]["messages"].extend(warn)
    blocks = report_doc(summary, images)
    return write_outputs(out_dir, summary, blocks, images, render_csv.report_tables(summary),
                         f"tokenswarm report {run.name}")


def write_compare(base: Run, cand: Run, summary: dict[str, Any], out_dir: Path, base_points: list[Any],
                  cand_points: list[Any], with_plots: bool = True) -> dict[str, Path]:
    """Write the comparison directory."""
    images, warn = compare_images(base, cand, summary, base_points, cand_points) if with_plots else ({}, [])
    summary["notes"].extend(warn)
    blocks = compare_doc(summary, images)
    return write_outputs(out_dir, summary, blocks, images, render_csv.compare_tables(summary),
                         f"tokenswarm compare {cand.name} vs {base.name}")
