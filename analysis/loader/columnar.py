"""The Parquet records store into numpy columns, one row group at a time, chunks as histograms.

Per-request columns come out as :func:`analysis.loader.records.read_records` makes them (same
names, dtypes and null conventions), so every per-request metric stays exact. Chunk lists are
*not* kept: each row group's ``chunk_offsets_ms`` / ``chunk_tokens`` list columns are read as
flat arrays and added to per-group histograms (:class:`analysis.chunkhist.ChunkAccumulator`),
so memory does not grow with the number of chunks. ``request_key`` and ``output_sha256``
(used only to pair runs in ``compare``) are read on first use.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenswarm.analysis.chunkhist import ChunkAccumulator, ChunkHistograms
from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.loader.records import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    SPEC_FIELDS,
    TOKEN_COUNT_FIELDS,
    _spec_fields,
    chunk_bounds,
)
from tokenswarm.collect.parquet_store import check_part, current_names, stored_names
from tokenswarm.collect.store import REJECTED_NAME, StoreFormatError, store_parts
from tokenswarm.record import MAX_PLAUSIBLE_TOKENS, OUTCOMES

#: Per-request columns read from every row group (chunk lists are handled apart).
_SCALARS: tuple[str, ...] = FLOAT_FIELDS + CATEGORICAL_FIELDS + ("step", "seq", "tokens_estimated", "spec_decode")
_LAZY_BYTES: tuple[str, ...] = ("request_key", "output_sha256")


class LazyColumns(dict[str, np.ndarray]):
    """Columns dict that reads ``request_key``/``output_sha256`` from the store on first access."""

    def __init__(self, data: dict[str, np.ndarray], parts: list[Path]) -> None:
        super().__init__(data)
        self._parts = parts

    def __missing__(self, name: str) -> np.ndarray:
        if name not in _LAZY_BYTES:
            raise KeyError(name)
        chunks = [pq.read_table(p, columns=[name], memory_map=True, use_threads=False).column(name) for p in self._parts]
        values = pa.chunked_array([c for ch in chunks for c in ch.chunks], type=pa.string()).fill_null("")
        arr = np.array(values.to_pylist(), dtype="S64")
        self[name] = arr
        return arr


def _floats(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False))  # null -> NaN


class _Categories:
    """Global dictionary codes of categorical columns across row groups (-1 = null)."""

    def __init__(self) -> None:
        self.maps: dict[str, dict[str, int]] = {c: {} for c in CATEGORICAL_FIELDS}

    def codes(self, name: str, col: pa.Array) -> np.ndarray:
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        m = self.maps[name]
        labels = col.dictionary.to_pylist()
        lut = np.array([m.setdefault(v, len(m)) for v in labels] + [-1], dtype=np.int32)
        idx = pc.fill_null(col.indices, len(labels)).to_numpy(zero_copy_only=False)
        return np.asarray(lut[idx])


def _chunk_columns(offs: pa.Array, toks: pa.Array) -> dict[str, np.ndarray]:
    """Flat offsets, aligned tokens (0 = unknown), per-request counts and exactness of one batch."""
    n = pc.fill_null(pc.list_value_length(offs), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(offs).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    tn = pc.list_value_length(toks)
    exact = pc.fill_null(pc.equal(tn, pa.array(n, type=tn.type)), False).to_numpy(zero_copy_only=False)
    if (exact | (n == 0)).all():  # a request without chunks adds no tokens either way
        tok = pc.list_flatten(toks).to_numpy(zero_copy_only=False)
    else:
        tok = np.zeros(flat.size, dtype=np.int32)
        tok[np.repeat(exact, n)] = pc.list_flatten(toks.filter(pa.array(exact))).to_numpy(zero_copy_only=False)
    return {"n": n, "flat": flat, "tok": tok, "exact": exact}


def _open_part(path: Path) -> pq.ParquetFile:
    """One finished part, memory-mapped, its schema checked (a ``RunInputError`` if it cannot be read)."""
    try:
        # memory-mapped, one thread: half the CPU of the defaults here (no copy, no thread hand-offs)
        pf = pq.ParquetFile(path, memory_map=True, read_dictionary=[c for c in CATEGORICAL_FIELDS])
        check_part(path, pf.schema_arrow)
    except (pa.ArrowException, OSError) as exc:
        raise RunInputError(f"{path}: not a readable Parquet records part ({exc})") from None
    except StoreFormatError as exc:
        raise RunInputError(str(exc)) from None
    return pf


class _ColumnSink:
    """Per-request columns written in place into arrays sized for the whole store (from the footers).

    Each row group's values are copied once into their final place, so its Arrow buffers (of
    which the batch's columns are zero-copy views) are freed before the next row group is read.
    Per-row-group pieces concatenated at the end would hold all of them, then a second copy of
    every column: about twice the columns' size at the peak.

    A float column is allocated only once a row group has a value in it: optional fields a run
    never filled (connection phases, reasoning, extraction checks, speculative decoding, ...)
    are NaN for every request and come out as one read-only broadcast NaN instead of 8 bytes
    per request each (about a third of the columns' memory on a plain streaming run).
    """

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.at = 0
        self.cols: dict[str, np.ndarray] = {}
        self.all_nan: set[str] = set()  # float columns without a value so far (not allocated)
        self.names: list[str] = []  # the first batch's column order, kept for the result

    def put(self, batch: dict[str, np.ndarray]) -> None:
        n = len(next(iter(batch.values())))
        if not self.names:
            self.names = list(batch)
        if self.at + n > self.rows:  # the footers under-counted (not expected): grow, amortised
            self.rows = max(self.at + n, 2 * self.rows)
            self.cols = {name: np.resize(a, self.rows) for name, a in self.cols.items()}
        for name, arr in batch.items():
            out = self.cols.get(name)
            if out is None:
                if arr.dtype.kind == "f" and (self.at == 0 or name in self.all_nan) and np.isnan(arr).all():
                    self.all_nan.add(name)
                    continue
                out = self.cols[name] = np.empty(self.rows, dtype=arr.dtype)
                if name in self.all_nan:
                    self.all_nan.discard(name)
                    out[: self.at] = np.nan
            out[self.at:self.at + n] = arr
        self.at += n

    def finish(self) -> dict[str, np.ndarray]:
        nan = np.broadcast_to(np.float64(np.nan), (self.at,))  # read-only, no memory per request
        out = {}
        for name in self.names:
            a = self.cols.get(name, nan)
            out[name] = a if a.size == self.at else a[: self.at].copy()
        return out


def read_store(run_dir: Path, keep_text: bool = False) -> tuple[LazyColumns, dict[str, list[str]], list[str],
                                                                 list[str | None] | None, ChunkHistograms, list[Path]]:
    """Read every finished part; returns (columns, categories, warnings, texts, chunk histograms, parts)."""
    parts, warnings = store_parts(run_dir)
    if (run_dir / REJECTED_NAME).is_file():
        warnings.append(f"{run_dir / REJECTED_NAME}: record lines that did not fit the store's schema "
                        "(kept as JSON lines, not analysed)")
    opened = [_open_part(path) for path in reversed(parts)]  # popped in reading order; footers give the size
    cats = _Categories()
    acc = ChunkAccumulator()
    sink = _ColumnSink(sum(pf.metadata.num_rows for pf in opened))
    texts: list[str | None] | None = [] if keep_text else None
    columns = list(_SCALARS) + ["chunk_offsets_ms", "chunk_tokens"] + (["output_text"] if keep_text else [])
    for path in parts:
        pf = opened.pop()  # dropped after its row groups, so its mapped pages leave the RSS
        stored = stored_names(pf.schema_arrow)
        present = [stored[c] for c in columns if c in stored]
        for rg in range(pf.num_row_groups):
            t = current_names(pf.read_row_group(rg, columns=present, use_threads=False).combine_chunks())
            cols = _batch(t, cats)
            _check_token_counts(cols, path, rg)
            if texts is not None and "output_text" in t.column_names:
                texts.extend(t.column("output_text").to_pylist())
            if "chunk_offsets_ms" not in t.column_names:
                raise RunInputError(f"{path}: records part lacks the chunk_offsets_ms column")
            ch = _chunk_columns(t.column("chunk_offsets_ms").chunk(0), t.column("chunk_tokens").chunk(0))
            del t
            cols.update(_chunk_summaries(ch))
            ok_code = cats.maps["outcome"].get("ok", -2)
            acc.add(cols["outcome"] == ok_code, cols["step"], cols["phase"], cols["task"],
                    ch["flat"], ch["n"], ch["tok"], ch["exact"])
            del ch
            sink.put(cols)
            del cols
        del pf
    out = sink.finish()
    categories = {name: list(m) for name, m in cats.maps.items()}
    bad = [o for o in categories["outcome"] if o not in OUTCOMES]
    if bad:
        raise RunInputError(f"{run_dir}: records have unknown outcome(s) {bad}; expected one of {OUTCOMES}")
    return LazyColumns(out, parts), categories, warnings, texts, acc.finish(), parts


def _check_token_counts(cols: dict[str, np.ndarray], path: Path, row_group: int) -> None:
    """Refuse a token count outside 0..MAX_PLAUSIBLE_TOKENS, naming the part, row group and row."""
    for name in TOKEN_COUNT_FIELDS:
        col = cols[name]
        bad = np.flatnonzero((col < 0) | (col > MAX_PLAUSIBLE_TOKENS))  # NaN (not observed) passes
        if bad.size:
            i = int(bad[0])
            raise RunInputError(f"{path}: row group {row_group}, row {i}: field {name!r} is {col[i]:g}, not a "
                                f"plausible token count (0 to {MAX_PLAUSIBLE_TOKENS})")


def _batch(t: pa.Table, cats: _Categories) -> dict[str, np.ndarray]:
    """Per-request columns of one row group (views of its Arrow buffers where no conversion is needed)."""
    n = t.num_rows
    cols: dict[str, np.ndarray] = {}
    names = set(t.column_names)
    for name in FLOAT_FIELDS:
        cols[name] = _floats(t.column(name).chunk(0)) if name in names else np.full(n, np.nan)
    for name in CATEGORICAL_FIELDS:
        cols[name] = cats.codes(name, t.column(name).chunk(0)) if name in names else np.full(n, -1, dtype=np.int32)
    step = pc.fill_null(t.column("step"), -1).to_numpy() if "step" in names else np.full(n, -1)
    cols["step"] = step.astype(np.int32)
    cols["seq"] = pc.fill_null(t.column("seq"), -1).to_numpy().astype(np.int64)
    cols["tokens_estimated"] = (pc.fill_null(t.column("tokens_estimated"), False).to_numpy(zero_copy_only=False)
                                if "tokens_estimated" in names else np.zeros(n, dtype=bool))
    sd = t.column("spec_decode").chunk(0) if "spec_decode" in names else pa.nulls(n, pa.string())
    spec = np.full((n, len(SPEC_FIELDS)), math.nan)
    if sd.null_count < n:
        for i, v in enumerate(sd.to_pylist()):
            if v is not None:
                spec[i] = _spec_fields(orjson.loads(v))
    for j, name in enumerate(SPEC_FIELDS):
        cols[name] = spec[:, j].copy()
    return cols


def _chunk_summaries(ch: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per-request chunk columns the exact loader also makes (first/last offsets, counts)."""
    n, exact = ch["n"], ch["exact"]
    _ptr, first, last, first_tok = chunk_bounds(n, ch["flat"], ch["tok"], exact)
    return {"n_chunks": n.astype(np.int32), "first_chunk_ms": first, "last_chunk_ms": last,
            "first_chunk_tokens": first_tok, "has_chunk_tokens": exact.astype(bool)}
