"""A run directory as a :class:`Run`: the manifest, the records files, the server metrics.

:func:`read_manifest` validates ``manifest.json`` (including its ``format_version``),
:func:`record_files` lists the records files in reading order, and :func:`load_run` reads
them all into one :class:`Run` of columnar arrays.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from tokenswarm.analysis.chunkhist import ChunkHistograms
from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.gpu import GpuMetrics, gpu_metrics_from_lines
from tokenswarm.analysis.loader.lines import _iter_json
from tokenswarm.analysis.loader.records import _Columns, _release_free_memory, read_records
from tokenswarm.analysis.loader.server_metrics import ServerMetrics, read_server_metrics
from tokenswarm.collect.store import PARTS_GLOB
from tokenswarm.manifest import ManifestError, RunManifest, read_run_manifest


@dataclass
class Run:
    """One run directory as columnar arrays (one element per request record).

    ``columns`` holds float64 columns (NaN = not observed), int columns (``step``: -1 = none,
    ``seq``), categorical codes (``task`` ...: int32, -1 = null, labels in ``categories``),
    booleans (``tokens_estimated``, ``has_chunk_tokens``) and fixed-width byte strings
    (``request_key``, ``output_sha256``; ``b""`` = null). Chunk data: see the
    :mod:`analysis.loader` docstring.
    """

    path: Path
    manifest: RunManifest
    columns: dict[str, np.ndarray]
    categories: dict[str, list[str]]
    gap_ptr: np.ndarray
    gap_ms: np.ndarray
    gap_tokens: np.ndarray
    server_metrics: ServerMetrics | None = None
    texts: list[str | None] | None = None
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: derived per-request arrays computed once (see analysis.per_request.derived)
    cache: dict[str, Any] = field(default_factory=dict, repr=False)
    #: GPU exporter series from ``server_metrics.jsonl`` (any source), see :mod:`analysis.gpu`
    gpu_metrics: Any = None
    #: a Parquet store's per-group chunk histograms (``gap_*`` are then empty: chunks are not kept)
    chunk_hists: ChunkHistograms | None = None

    def __len__(self) -> int:
        return int(self.columns["sent_at_s"].shape[0])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @property
    def name(self) -> str:
        """Directory name (used in titles and default output names)."""
        return self.path.name

    @property
    def n_gaps(self) -> np.ndarray:
        """Number of chunk gaps of every request (``max(n_chunks - 1, 0)``)."""
        return np.diff(self.gap_ptr)

    def code(self, column: str, label: str) -> int:
        """Code of ``label`` in a categorical column, or -2 (matches nothing) if absent."""
        try:
            return self.categories[column].index(label)
        except ValueError:
            return -2

    def labels(self, column: str) -> np.ndarray:
        """Decoded categorical column as an object array (``None`` for null)."""
        cats = np.array(self.categories[column] + [None], dtype=object)
        out: np.ndarray = cats[self.columns[column]]
        return out

    def to_dataframe(self) -> Any:
        """Per-request columns as a pandas DataFrame (requires pandas; chunk data excluded)."""
        import pandas as pd  # optional dependency, imported only on request  # pandas: only for a DataFrame

        data = {}
        for name, arr in self.columns.items():
            data[name] = self.labels(name) if name in self.categories else arr
        return pd.DataFrame(data)


def read_manifest(run_dir: str | os.PathLike[str]) -> RunManifest:
    """Load and validate ``manifest.json``; raise :class:`RunInputError` naming the file and field.

    The typed value is :class:`tokenswarm.manifest.RunManifest`, the one the controller writes:
    keys it does not know are kept in ``extra``, keys older manifests lack get its defaults.
    """
    try:
        return read_run_manifest(run_dir)
    except ManifestError as exc:
        raise RunInputError(str(exc)) from None


_ROTATED = re.compile(r"^records-\d+\.jsonl(\.gz)?$")


def record_files(run_dir: Path) -> list[Path]:
    """Records files of a run in reading order (rotated files by name, then ``records.jsonl``)."""
    rotated = sorted(p for p in run_dir.iterdir() if _ROTATED.match(p.name))
    plain, gz = run_dir / "records.jsonl", run_dir / "records.jsonl.gz"
    files = list(rotated)
    if plain.is_file():
        files.append(plain)
    elif gz.is_file():
        files.append(gz)
    if not files:
        raise RunInputError(
            f"{run_dir}: no records file (records.jsonl, records.jsonl.gz or records-NNNNNN.jsonl[.gz])"
        )
    return files


def load_run(path: str | os.PathLike[str], keep_text: bool = False) -> Run:
    """Load a run directory into a :class:`Run`.

    Parameters
    ----------
    path
        The run directory (with ``manifest.json`` and records files).
    keep_text
        Keep ``output_text`` of every record (needed only for compare's divergence position
        and similarity); off by default because texts dominate memory.

    Raises
    ------
    RunInputError
        Missing/truncated manifest, unknown format version, no records file, a broken line
        that is not the last one, a record missing a required field.
    """
    run_dir = Path(path)
    manifest = read_manifest(run_dir)
    if any(run_dir.glob(PARTS_GLOB)):
        return _load_store(run_dir, manifest, keep_text)
    files = record_files(run_dir)
    cols, cats, warnings, texts = read_records(files, keep_text=keep_text, v1=manifest.format_version == 1)
    _release_free_memory()
    if not cols:
        raise RunInputError(f"{run_dir}: records files contain no records ({', '.join(f.name for f in files)})")
    gap_ms = cols.pop("_gap_ms")
    gap_tokens = cols.pop("_gap_tokens")
    n_gaps = np.maximum(cols["n_chunks"].astype(np.int64) - 1, 0)
    gap_ptr = np.zeros(n_gaps.size + 1, dtype=np.int64)
    np.cumsum(n_gaps, out=gap_ptr[1:])
    sm = read_server_metrics(run_dir / "server_metrics.jsonl", warnings)
    return Run(
        path=run_dir,
        manifest=manifest,
        columns=cols,
        categories=cats,
        gap_ptr=gap_ptr,
        gap_ms=gap_ms,
        gap_tokens=gap_tokens,
        server_metrics=sm,
        texts=texts,
        warnings=warnings,
        files=[str(f) for f in files],
        gpu_metrics=read_gpu_metrics(run_dir / "server_metrics.jsonl", warnings),
    )


def run_from_records(records: Iterable[Mapping[str, Any]], manifest: RunManifest,
                     path: str | os.PathLike[str] = ".") -> Run:
    """A :class:`Run` of record dicts held in memory (e.g. one step's records during a run).

    The same columns as :func:`load_run`, so every table and SLO check applies unchanged;
    ``path`` only names the run in messages. Raises :class:`RunInputError` on a bad record.
    """
    acc = _Columns(keep_text=False)
    for i, rec in enumerate(records):
        acc.add(dict(rec), f"{path}: record {i}")
    cols, cats = acc.finish()
    if not cols:
        raise RunInputError(f"{path}: no records")
    gap_ms, gap_tokens = cols.pop("_gap_ms"), cols.pop("_gap_tokens")
    n_gaps = np.maximum(cols["n_chunks"].astype(np.int64) - 1, 0)
    gap_ptr = np.zeros(n_gaps.size + 1, dtype=np.int64)
    np.cumsum(n_gaps, out=gap_ptr[1:])
    return Run(path=Path(path), manifest=manifest, columns=cols, categories=cats, gap_ptr=gap_ptr, gap_ms=gap_ms,
               gap_tokens=gap_tokens)


def read_gpu_metrics(path: Path, warnings: list[str]) -> GpuMetrics | None:
    """GPU series of a run's ``server_metrics.jsonl`` (``None``: no file or no GPU exporter)."""
    if not path.is_file():
        return None
    return gpu_metrics_from_lines(obj for _lineno, obj in _iter_json(path, warnings))


def _load_store(run_dir: Path, manifest: RunManifest, keep_text: bool) -> Run:
    """:func:`load_run` for a Parquet store: per-request columns, chunks as histograms."""
    # pyarrow: only for a Parquet store
    from tokenswarm.analysis.loader.columnar import read_store  # pyarrow: only for Parquet stores

    cols, cats, warnings, texts, hists, parts = read_store(run_dir, keep_text=keep_text)
    _release_free_memory()
    if not cols or cols["sent_at_s"].size == 0:
        raise RunInputError(f"{run_dir}: records store contains no records ({', '.join(p.name for p in parts)})")
    sm = read_server_metrics(run_dir / "server_metrics.jsonl", warnings)
    return Run(
        path=run_dir, manifest=manifest, columns=cols, categories=cats,
        gap_ptr=np.zeros(len(cols["sent_at_s"]) + 1, dtype=np.int64), gap_ms=np.empty(0, dtype=np.float32),
        gap_tokens=np.empty(0, dtype=np.int16), server_metrics=sm, texts=texts, warnings=warnings,
        files=[str(p) for p in parts], chunk_hists=hists,
        gpu_metrics=read_gpu_metrics(run_dir / "server_metrics.jsonl", warnings),
    )
