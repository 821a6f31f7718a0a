"""Read a run directory (CONTRACTS.md section 1) into columnar numpy arrays.

This is the only module of the computing core that touches files. It streams
``records.jsonl`` (plain, ``.gz`` or rotated ``records-*.jsonl[.gz]``) line by line with
orjson and converts every few thousand records into numpy arrays, so memory is a few dozen
bytes per request plus ~6 bytes per streamed chunk, never one Python object per record.

Chunk lists are kept in CSR layout as the *gaps* between consecutive chunks of one request:
request ``i`` owns ``gap_ms[gap_ptr[i]:gap_ptr[i+1]]`` (``n_chunks[i] - 1`` values, float32,
computed in float64 from the recorded offsets before narrowing, so each gap keeps ~7
significant digits) and ``gap_tokens`` holds the token count of the chunk that *ends* each gap.
The first chunk's offset and token count and the last chunk's offset are per-request columns.
Everything the glossary derives from chunk lists (ITL, inter-chunk gaps, tokens per chunk)
is a function of these.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from array import array
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import orjson

from analysis.errors import RunInputError
from analysis.fastnum import parse_ints
from tokenswarm.record import FORMAT_VERSION, OUTCOMES

#: Compact-JSON key of the per-chunk token list (what orjson and RequestRecord.to_json write).
_TOKENS_KEY = b'"chunk_tokens":['
#: Records converted to numpy per batch: bounds the transient Python objects.
BATCH_RECORDS = 8192

#: Float columns (``None`` -> NaN). Integers that may be null are kept as float64 too
#: (exact below 2**53) so "not observed" stays distinguishable from 0.
FLOAT_FIELDS: tuple[str, ...] = (
    "scheduled_at",
    "sent_at",
    "schedule_lag_ms",
    "ttft_ms",
    "e2e_ms",
    "prompt_tokens",
    "output_tokens",
    "max_tokens",
    "temperature",
    "http_status",
    "turn",
)
#: Low-cardinality string fields, dictionary-encoded as int32 codes (-1 = null).
CATEGORICAL_FIELDS: tuple[str, ...] = (
    "task",
    "outcome",
    "phase",
    "error",
    "finish_reason",
    "worker_id",
    "user_class",
    "model",
    "api",
)
#: Per-request speculative-decoding columns (NaN when the server sent none).
SPEC_FIELDS: tuple[str, ...] = (
    "sd_num_spec_steps",
    "sd_num_accepted_tokens",
    "sd_num_draft_tokens",
    "sd_num_spec_tokens",
    "sd_mean_acceptance_length",
)


@dataclass
class ServerMetrics:
    """Prometheus scrapes of one source, reduced to one number per metric name per scrape.

    Counters and gauges are summed over label sets (``engine``, ``model_name`` ...) except
    names ending in ``_perc`` (fractions such as KV-cache use), which are averaged. ``_created``
    series are dropped. ``per_pos`` keeps the ``position`` label of
    ``vllm:spec_decode_num_accepted_tokens_per_pos_total`` apart (summed over engines).
    """

    scraped_at_s: np.ndarray
    step: np.ndarray
    series: dict[str, np.ndarray]
    per_pos: dict[int, np.ndarray]
    source: str = "target"

    def value(self, name: str) -> np.ndarray | None:
        """Values of one metric per scrape (NaN where a scrape lacked it), or ``None``."""
        return self.series.get(name)


@dataclass
class Run:
    """One run directory as columnar arrays (one element per request record).

    ``columns`` holds float64 columns (NaN = not observed), int columns (``step``: -1 = none,
    ``seq``), categorical codes (``task`` ...: int32, -1 = null, labels in ``categories``),
    booleans (``tokens_estimated``, ``has_chunk_tokens``) and fixed-width byte strings
    (``request_key``, ``output_sha256``; ``b""`` = null). Chunk data: see the module docstring.
    """

    path: Path
    manifest: dict[str, Any]
    columns: dict[str, np.ndarray]
    categories: dict[str, list[str]]
    gap_ptr: np.ndarray
    gap_ms: np.ndarray
    gap_tokens: np.ndarray
    server_metrics: ServerMetrics | None = None
    texts: list[str | None] | None = None
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: derived per-request arrays computed once (see analysis.tables.derived)
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.columns["sent_at"].shape[0])

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
        return cats[self.columns[column]]

    def to_dataframe(self):
        """Per-request columns as a pandas DataFrame (requires pandas; chunk data excluded)."""
        import pandas as pd  # optional dependency, imported only on request

        data = {}
        for name, arr in self.columns.items():
            data[name] = self.labels(name) if name in self.categories else arr
        return pd.DataFrame(data)


# --------------------------------------------------------------------------- files


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """Load and validate ``manifest.json``; raise :class:`RunInputError` naming the file."""
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise RunInputError(f"{run_dir}: not a run directory (does not exist or is not a directory)")
    if not path.is_file():
        raise RunInputError(f"{path}: missing (every run directory has a manifest.json)")
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise RunInputError(f"{path}: truncated or not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise RunInputError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise RunInputError(
            f"{path}: unknown format_version {version!r}; this analysis reads format_version {FORMAT_VERSION}"
        )
    return manifest


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


def _blocks(path: Path, warnings: list[str], block_bytes: int) -> Iterator[bytes]:
    """Decompressed blocks of a file; a gzip stream cut short ends with a warning, not an error.

    Gzip is decompressed incrementally (``zlib``), so everything before the cut is kept, and
    concatenated gzip members (a writer that reopened the file) are followed.
    """
    with open(path, "rb") as fh:
        if not path.name.endswith(".gz"):
            while block := fh.read(block_bytes):
                yield block
            return
        d = zlib.decompressobj(wbits=31)
        while raw := fh.read(block_bytes // 4):
            while raw:
                try:
                    out = d.decompress(raw)
                except zlib.error as exc:
                    warnings.append(f"{path}: corrupt compressed data ({exc}); read what was complete")
                    return
                if out:
                    yield out
                raw = b""
                if d.eof and d.unused_data:
                    raw, d = d.unused_data, zlib.decompressobj(wbits=31)
        tail = d.flush()
        if tail:
            yield tail
        if not d.eof:
            warnings.append(f"{path}: compressed stream cut short (crash mid-write?); read what was complete")


def _iter_lines(path: Path, warnings: list[str], block_bytes: int = 8 << 20) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line_number, line, is_last)``, reading big blocks (much faster than line iteration)."""
    lineno = 0
    carry = b""
    pending: bytes | None = None
    for block in _blocks(path, warnings, block_bytes):
        lines = (carry + block).split(b"\n")
        carry = lines.pop()  # incomplete (or empty) tail
        for line in lines:
            if pending is not None:
                yield lineno, pending, False
            lineno += 1
            pending = line
    if carry:
        if pending is not None:
            yield lineno, pending, False
        yield lineno + 1, carry, True
    elif pending is not None:
        yield lineno, pending, True


def _tolerate_bad_line(path: Path, lineno: int, line: bytes, is_last: bool, warnings: list[str]) -> None:
    """A line that is not JSON: blank lines pass, a truncated *last* line is skipped with a
    warning (a writer killed mid-write); anywhere else it is an error naming file and line."""
    if not line.strip():
        return
    if is_last:
        warnings.append(f"{path}:{lineno}: truncated last line skipped (the writer probably stopped mid-write)")
        return
    raise RunInputError(f"{path}:{lineno}: not valid JSON (only a truncated last line is tolerated)") from None


def _iter_json(path: Path, warnings: list[str]) -> Iterator[tuple[int, dict]]:
    """Decoded JSON objects of a JSON-lines file; only the last line may be broken (skipped)."""
    loads = orjson.loads
    for lineno, line, is_last in _iter_lines(path, warnings):
        try:
            obj = loads(line)
        except orjson.JSONDecodeError:
            _tolerate_bad_line(path, lineno, line, is_last, warnings)
            continue
        if not isinstance(obj, dict):
            raise RunInputError(f"{path}:{lineno}: expected a JSON object per line")
        yield lineno, obj


# --------------------------------------------------------------------------- records


def _spec_fields(sd: Any) -> tuple[float, float, float, float, float]:
    """Per-request spec-decode numbers from vLLM's ``metrics.speculative_decoding`` object.

    Accepts the current shape (dense ``acceptance_histogram`` list) and the earlier
    per-choice ``speculative_decoding_stats`` shape (sparse ``{"j": count}`` histogram);
    missing counts are rebuilt from the histogram when possible.
    """
    nan = math.nan
    if not isinstance(sd, dict):
        return (nan, nan, nan, nan, nan)
    if isinstance(sd.get("speculative_decoding"), dict):  # a whole ``metrics`` object was stored
        sd = sd["speculative_decoding"]
    steps = sd.get("num_spec_steps")
    acc = sd.get("num_accepted_draft_tokens", sd.get("num_accepted_tokens"))
    draft = sd.get("num_draft_tokens")
    k = sd.get("num_spec_tokens")
    mal = sd.get("mean_acceptance_length")
    hist = sd.get("acceptance_histogram")
    if hist is not None and (steps is None or acc is None):
        items = hist.items() if isinstance(hist, dict) else enumerate(hist)
        pairs = [(int(j), float(c)) for j, c in items]
        if steps is None:
            steps = sum(c for _, c in pairs)
        if acc is None:
            acc = sum(j * c for j, c in pairs)
    if mal is None and steps and acc is not None:
        mal = 1.0 + acc / steps
    return tuple(nan if v is None else float(v) for v in (steps, acc, draft, k, mal))  # type: ignore[return-value]


#: Fields read from every record, in tuple order (one C-level itemgetter call per record).
_READ_FIELDS: tuple[str, ...] = FLOAT_FIELDS + CATEGORICAL_FIELDS + (
    "step", "seq", "tokens_estimated", "request_key", "output_sha256", "spec_decode",
    "chunk_tokens", "run_id",
)
_REQUIRED = ("run_id", "worker_id", "seq", "task", "user_class", "outcome", "request_key", "scheduled_at", "sent_at")
_IDX = {name: i for i, name in enumerate(_READ_FIELDS)}


class _Columns:
    """Accumulates one batch of records as tuples, then converts the batch to numpy columns.

    The per-record work is one ``orjson.loads`` and one ``itemgetter`` call (all fields at once,
    in C); records lacking optional fields take a slower path that also names a missing
    required field.
    """

    def __init__(self, keep_text: bool) -> None:
        self.keep_text = keep_text
        self.cat_maps: dict[str, dict[Any, int]] = {c: {} for c in CATEGORICAL_FIELDS}
        self.parts: dict[str, list[np.ndarray]] = {}
        self.texts: list[str | None] = []
        self.n_bad_chunk_tokens = 0
        self.getter = itemgetter(*_READ_FIELDS)
        self.rows: list[tuple] = []
        self.tok_segs: list[bytes | None] = []
        self.off_buf = array("d")
        self.n_list: list[int] = []
        self.count = 0

    def add(self, d: dict, where: str, tok_seg: bytes | None = None) -> None:
        """Append one decoded record (required fields checked, others optional).

        ``tok_seg`` is the raw text of ``chunk_tokens`` cut out of the line before decoding
        (the record then holds ``True`` there); see :func:`read_records`.
        """
        self.tok_segs.append(tok_seg)
        offs = d.get("chunk_offsets_ms")
        if offs:
            # Convert while the float objects are hot in cache; the list dies with the record.
            try:
                self.off_buf.extend(offs)
            except TypeError:
                raise RunInputError(f"{where}: field 'chunk_offsets_ms' must be a list of numbers") from None
            self.n_list.append(len(offs))
        else:
            self.n_list.append(0)
        try:
            self.rows.append(self.getter(d))
        except KeyError:
            missing = [name for name in _REQUIRED if name not in d]
            if missing:
                raise RunInputError(f"{where}: missing required field {missing[0]!r}") from None
            self.rows.append(tuple(d.get(name) for name in _READ_FIELDS))
        if self.keep_text:
            self.texts.append(d.get("output_text"))
        self.count += 1

    def _put(self, name: str, arr: np.ndarray) -> None:
        self.parts.setdefault(name, []).append(arr)

    def flush(self) -> None:
        """Convert the current batch to numpy arrays and start a new batch."""
        if not self.count:
            return
        cols = list(zip(*self.rows))
        segs = self.tok_segs
        off = np.frombuffer(self.off_buf, dtype=np.float64) if len(self.off_buf) else np.empty(0)
        n = np.array(self.n_list, dtype=np.int64)
        self.rows = []
        self.tok_segs = []
        self.off_buf = array("d")
        self.n_list = []
        self.count = 0
        for name in FLOAT_FIELDS:
            lst = cols[_IDX[name]]
            try:
                self._put(name, np.array(lst, dtype=np.float64))  # None -> NaN
            except (TypeError, ValueError):
                bad = next(v for v in lst if v is not None and not isinstance(v, (int, float)))
                raise RunInputError(f"records: field {name!r} has non-numeric value {bad!r}") from None
        for name in CATEGORICAL_FIELDS:
            m = self.cat_maps[name]
            for v in set(cols[_IDX[name]]):
                if v is not None and v not in m:
                    m[v] = len(m)
            get = m.get
            self._put(name, np.array([get(v, -1) for v in cols[_IDX[name]]], dtype=np.int32))
        step = np.array(cols[_IDX["step"]], dtype=np.float64)
        self._put("step", np.where(np.isnan(step), -1, step).astype(np.int32))
        self._put("seq", np.array(cols[_IDX["seq"]], dtype=np.int64))
        self._put("tokens_estimated", np.array([bool(v) for v in cols[_IDX["tokens_estimated"]]], dtype=bool))
        self._put("request_key", np.array([v or "" for v in cols[_IDX["request_key"]]], dtype="S64"))
        self._put("output_sha256", np.array([v or "" for v in cols[_IDX["output_sha256"]]], dtype="S64"))
        nan5 = (math.nan,) * 5
        sd = np.array([nan5 if v is None else _spec_fields(v) for v in cols[_IDX["spec_decode"]]],
                      dtype=np.float64).reshape(-1, 5)
        for j, name in enumerate(SPEC_FIELDS):
            self._put(name, sd[:, j].copy())
        # Chunk lists -> per-request first/last offsets and CSR gaps (float64 diff, then float32).
        toks_col = cols[_IDX["chunk_tokens"]]
        total = int(n.sum())
        tok, has_tok_list = self._tokens(n.tolist(), toks_col, segs, n, total)
        del cols, toks_col
        ptr = np.zeros(n.size + 1, dtype=np.int64)
        np.cumsum(n, out=ptr[1:])
        has = n > 0
        first = np.full(n.size, np.nan)
        last = np.full(n.size, np.nan)
        first_tok = np.full(n.size, -1, dtype=np.int32)
        first[has] = off[ptr[:-1][has]]
        last[has] = off[ptr[1:][has] - 1]
        has_tok = np.array(has_tok_list, dtype=bool)
        ft = tok[ptr[:-1][has]]
        first_tok[has] = np.where(has_tok[has], ft, -1)
        if off.size > 1:
            keep = np.ones(off.size - 1, dtype=bool)
            starts = ptr[1:-1]
            starts = starts[(starts > 0) & (starts < off.size)]
            keep[starts - 1] = False  # the step from one request's last chunk to the next's first
            gaps = np.diff(off)[keep].astype(np.float32)
            gap_tok = tok[1:][keep]
        else:
            gaps = np.empty(0, dtype=np.float32)
            gap_tok = np.empty(0, dtype=tok.dtype)
        self._put("n_chunks", n.astype(np.int32))
        self._put("first_chunk_ms", first)
        self._put("last_chunk_ms", last)
        self._put("first_chunk_tokens", first_tok)
        self._put("has_chunk_tokens", has_tok)
        self._put("_gap_ms", gaps)
        self._put("_gap_tokens", gap_tok)

    def _tokens(self, lens: list[int], toks_col: tuple, segs: list, n: np.ndarray, total: int) -> tuple[np.ndarray, list[bool]]:
        """Flat per-chunk token counts aligned with the offsets (0 where unknown), and exactness flags.

        ``lens`` are the numbers of chunk offsets of the batch's records.
        """
        if any(isinstance(t, list) for t in toks_col):
            # Some lines were not in compact form: decode their raw segments the slow way too.
            toks_col = tuple(orjson.loads(b"[" + g + b"]") if t is True else t for t, g in zip(toks_col, segs))
            has = [t is not None and len(t) == o for o, t in zip(lens, toks_col)]
            self.n_bad_chunk_tokens += sum(1 for o, t, h in zip(lens, toks_col, has) if t is not None and not h and o)
            tok = np.fromiter(
                chain.from_iterable(t if h else repeat(0, o) for o, t, h in zip(lens, toks_col, has)),
                dtype=np.int32, count=total,
            )
            return tok, has
        # Fast path: count the commas of each raw segment, parse all exact ones in one C call.
        counts = [(g.count(b",") + 1 if g.strip() else 0) if t is True else -1 for t, g in zip(toks_col, segs)]
        has = [c == o for c, o in zip(counts, lens)]
        self.n_bad_chunk_tokens += sum(1 for c, h, o in zip(counts, has, lens) if c >= 0 and not h and o)
        joined = b",".join(g for g, h, o in zip(segs, has, lens) if h and o)
        has_arr = np.array(has, dtype=bool)
        expected = int(n[has_arr].sum())
        try:
            exact_vals = parse_ints(joined, expected)
        except ValueError as exc:
            raise RunInputError(f"records: malformed chunk_tokens list in a batch ({exc})") from None
        # int16 unless a chunk carries more tokens than that (then int32; batches are promoted on concat)
        dtype = np.int16 if exact_vals.size == 0 or exact_vals.max() <= np.iinfo(np.int16).max else np.int32
        tok = np.zeros(total, dtype=dtype)
        tok[np.repeat(has_arr, n)] = exact_vals
        return tok, has

    def finish(self) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
        """Concatenate all batches (one column at a time, freeing parts as we go)."""
        self.flush()
        cols: dict[str, np.ndarray] = {}
        for name in list(self.parts):
            parts = self.parts.pop(name)
            if len(parts) == 1:
                cols[name] = parts[0]
                continue
            # Copy part by part into a lazily committed buffer and free each part right away, so
            # the peak is ~1x the column, not the 2x of np.concatenate.
            dtype = np.result_type(*parts)
            out = np.empty((sum(p.shape[0] for p in parts),) + parts[0].shape[1:], dtype=dtype)
            pos = 0
            parts.reverse()
            while parts:
                p = parts.pop()
                out[pos:pos + p.shape[0]] = p
                pos += p.shape[0]
                del p
            cols[name] = out
        cats = {name: list(m) for name, m in self.cat_maps.items()}
        return cols, cats


def read_records(files: list[Path], keep_text: bool = False) -> tuple[dict[str, np.ndarray], dict[str, list[str]], list[str], list[str | None] | None]:
    """Stream records files into columns; returns (columns, categories, warnings, texts)."""
    warnings: list[str] = []
    acc = _Columns(keep_text)
    loads = orjson.loads
    key = _TOKENS_KEY
    klen = len(key)
    for path in files:
        for lineno, line, is_last in _iter_lines(path, warnings):
            # Cut the chunk_tokens list out of the line: parsed later for a whole batch in C,
            # which avoids one Python int per chunk (the bulk of the data with chunk_offsets_ms).
            i = line.find(key)
            seg = None
            if i >= 0:
                j = line.find(b"]", i)
                seg = line[i + klen:j]
                line = line[:i] + b'"chunk_tokens":true' + line[j + 1:]
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                _tolerate_bad_line(path, lineno, line, is_last, warnings)
                continue
            if type(obj) is not dict:
                raise RunInputError(f"{path}:{lineno}: expected a JSON object per line")
            acc.add(obj, f"{path}:{lineno}", seg)
            if acc.count >= BATCH_RECORDS:
                acc.flush()
                _release_free_memory()  # keep the parsing garbage from piling up in the peak RSS
    cols, cats = acc.finish()
    if acc.n_bad_chunk_tokens:
        warnings.append(
            f"{acc.n_bad_chunk_tokens} record(s) had chunk_tokens of a different length than chunk_offsets_ms; "
            "their per-chunk token counts were treated as unknown"
        )
    if "outcome" not in cols:
        cols = {}
    else:
        bad = [o for o in cats["outcome"] if o not in OUTCOMES]
        if bad:
            raise RunInputError(f"{files[0].parent}: records have unknown outcome(s) {bad}; expected one of {OUTCOMES}")
    return cols, cats, warnings, (acc.texts if keep_text else None)


# --------------------------------------------------------------------------- server metrics


def read_server_metrics(path: Path, warnings: list[str], source: str = "target") -> ServerMetrics | None:
    """Reduce ``server_metrics.jsonl`` scrapes of ``source`` to per-name series (see class doc)."""
    if not path.is_file():
        return None
    times: list[float] = []
    steps: list[float] = []
    rows: list[dict[str, float]] = []
    pos_rows: list[dict[int, float]] = []
    per_pos_name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
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
            if name == per_pos_name:
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


# --------------------------------------------------------------------------- entry point


def _release_free_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``); a no-op elsewhere.

    Parsing frees hundreds of MB of per-batch objects and arrays that glibc would otherwise
    keep mapped, inflating the peak RSS of the analysis that follows.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def load_run(path: str | os.PathLike, keep_text: bool = False) -> Run:
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
    files = record_files(run_dir)
    cols, cats, warnings, texts = read_records(files, keep_text=keep_text)
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
    )
