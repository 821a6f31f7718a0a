"""Spec-Bench classes: a class that reads Spec-Bench's question file, split by task category.

The file is found from the class's dataset (``format: spec_bench``, or detected by ``auto``).
The class becomes one class per task category, named by it, so every table splits by category;
``dataset.categories`` keeps only those named.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tokenswarm.workload.corpora.datasets import DatasetError, category_counts, file_format, load_dataset
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import _CLASS_NAME, TaskConfig
from tokenswarm.workload.scenario.paths import _resolve_file


def _spec_bench_source(cfg: dict[str, Any], path: str, file: str, base_dir: Path) -> bool:
    """Whether the class reads a Spec-Bench question file (``format: spec_bench``, or detected by ``auto``)."""
    ds = cfg.get("dataset")
    if not isinstance(ds, dict) or not isinstance(ds.get("path"), str):
        return False
    fmt = ds.get("format", "auto")
    if fmt != "auto":
        return bool(fmt == "spec_bench")
    resolved = _resolve_file(ds["path"], base_dir)
    if resolved is None:
        return False  # the dataset section reports the missing file
    return file_format(resolved) == "spec_bench"


def _categories(ds: _Section) -> tuple[str, ...] | None:
    """``dataset.categories``: the Spec-Bench task categories to send (None: all of the file's)."""
    if not ds.has("categories"):
        return None
    raw = ds.raw("categories", None)
    if not isinstance(raw, list) or not raw or not all(isinstance(c, str) and _CLASS_NAME.match(c) for c in raw):
        raise ds.err("categories", "a non-empty list of category names (e.g. [translation, rag])")
    if ds.has("category"):
        raise ds.err("categories", "category or categories, not both")
    return tuple(dict.fromkeys(raw))


def _spec_bench_split(task: TaskConfig, categories: tuple[str, ...] | None, s: _Section) -> list[TaskConfig]:
    """One class per Spec-Bench task category, named by it, so every table splits by category.

    The class's weight is shared out in proportion to the questions of each category, so the mix
    is the file's (a uniform draw over its questions); ``categories`` keeps only those named.
    """
    assert task.dataset is not None
    try:
        counts = category_counts(load_dataset(task.dataset.path, "spec_bench"))
    except DatasetError as exc:
        raise s.err("dataset", "a valid Spec-Bench question file", str(exc)) from None
    if categories is not None:
        missing = [c for c in categories if c not in counts]
        if missing:
            raise s.err("dataset", f"categories the file has ({', '.join(counts)})", missing)
        counts = {c: counts[c] for c in categories}
    total = sum(counts.values())
    return [dataclasses.replace(task, name=cat, weight=task.weight * n / total,
                                dataset=dataclasses.replace(task.dataset, category=cat))
            for cat, n in counts.items()]
