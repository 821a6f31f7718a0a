"""Records files into numpy columns, one batch of a few thousand records at a time.

:func:`read_records` streams the lines, cuts each ``chunk_tokens`` list out for a batched C
parse, and hands the record to :class:`_Columns`, which accumulates a batch as tuples and
converts it to float, categorical, boolean, byte-string and chunk columns (the CSR gap layout
of the :mod:`analysis.loader` docstring). The field lists name every column read.
"""

from __future__ import annotations

import ctypes
import math
from array import array
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.fastnum import parse_ints
from tokenswarm.analysis.loader.lines import _iter_lines, _tolerate_bad_line
from tokenswarm.record import MAX_PLAUSIBLE_TOKENS, OUTCOMES, upgrade_v1

#: Compact-JSON key of the per-chunk token list (what orjson and RequestRecord.to_json write).
_TOKENS_KEY = b'"chunk_tokens":['
#: Records converted to numpy per batch: bounds the transient Python objects.
BATCH_RECORDS = 8192

#: Float columns (``None`` -> NaN). Integers that may be null are kept as float64 too
#: (exact below 2**53) so "not observed" stays distinguishable from 0.
FLOAT_FIELDS: tuple[str, ...] = (
    "scheduled_at_s",
    "sent_at_s",
    "schedule_lag_ms",
    "ttft_ms",
    "e2e_ms",
    "prompt_tokens",
    "output_tokens",
    "max_tokens",
    "temperature",
    "http_status",
    "turn",
    # request phases (optional fields; conn_reused as 1.0 / 0.0 / NaN)
    "conn_reused",
    "connect_ms",
    "send_delay_ms",
    "headers_ms",
    "json_valid",  # extraction quality: true/false -> 1/0, not checked -> NaN
    "schema_valid",
    "first_reasoning_token_ms",  # reasoning streams only (NaN otherwise)
    "first_answer_token_ms",
    "reasoning_chunks",
    "reasoning_tokens",
)
#: Token counts a record may hold: 0..MAX_PLAUSIBLE_TOKENS (tokenswarm.record). Anything else is
#: refused with the file and line, never turned into an absurd rate in a report.
TOKEN_COUNT_FIELDS: tuple[str, ...] = ("prompt_tokens", "output_tokens", "reasoning_tokens")
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
    return tuple(nan if v is None else float(v) for v in (steps, acc, draft, k, mal))  # type: ignore[return-value]  # five floats, nan where not observed


#: Fields read from every record, in tuple order (one C-level itemgetter call per record).
_READ_FIELDS: tuple[str, ...] = FLOAT_FIELDS + CATEGORICAL_FIELDS + (
    "step", "seq", "tokens_estimated", "request_key", "output_sha256", "spec_decode",
    "chunk_tokens", "run_id",
)
_REQUIRED = ("run_id", "worker_id", "seq", "task", "user_class", "outcome", "request_key", "scheduled_at_s", "sent_at_s")
#: Fields read apart from that tuple: the chunk offsets (into the CSR gap arrays) and, with
#: ``keep_text``, the output text.
READ_APART: tuple[str, ...] = ("chunk_offsets_ms", "output_text")
#: Every record field this loader reads.
READ_FIELDS: tuple[str, ...] = _READ_FIELDS + READ_APART
#: Record fields the analysis deliberately does not read, and why. Every field of
#: :class:`tokenswarm.record.RequestRecord` is in :data:`READ_FIELDS` or here (a test checks),
#: so a field added to the record is either analysed or consciously left out.
IGNORED_FIELDS: dict[str, str] = {
    "session_id": "identifies a multi-turn conversation for tracing and replay; the analysis groups by task "
                  "and turn, and no metric is per session",
    "response_id": "the server's id of the response, kept to find a record in the server's logs",
    "extra": "free-form data from plugins and user code; the analysis defines no meaning for it",
    "chunk_tokens_inferred": "says how chunk_tokens were obtained (proven one per event); the analysis uses the "
                             "counts the same way either way",
    "answer_chunks": "reasoning analyses use reasoning_chunks and first_answer_token_ms; the answer's chunk "
                     "count is n_chunks - reasoning_chunks",
    "e2e_app_ms": "a diagnostic: the application's own end reading, beside e2e_ms dated by the last delivery's "
                  "kernel stamp; the analysis reports e2e_ms",
}
_IDX = {name: i for i, name in enumerate(_READ_FIELDS)}



def chunk_bounds(n: np.ndarray, offsets: np.ndarray, tokens: np.ndarray, exact: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-request chunk summaries from flat chunk lists: ``(ptr, first_ms, last_ms, first_tokens)``.

    ``n`` chunks per request, ``offsets``/``tokens`` flat; ``ptr`` is the CSR index (request i's
    chunks are ``ptr[i]:ptr[i + 1]``). Requests without chunks get NaN offsets; the first
    chunk's tokens are -1 where the request has no exact counts (``exact`` false).
    """
    ptr = np.zeros(n.size + 1, dtype=np.int64)
    np.cumsum(n, out=ptr[1:])
    has = n > 0
    first = np.full(n.size, np.nan)
    last = np.full(n.size, np.nan)
    first_tok = np.full(n.size, -1, dtype=np.int32)
    first[has] = offsets[ptr[:-1][has]]
    last[has] = offsets[ptr[1:][has] - 1]
    first_tok[has] = np.where(exact[has], tokens[ptr[:-1][has]], -1)
    return ptr, first, last, first_tok

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
        self.rows: list[tuple[Any, ...]] = []
        self.tok_segs: list[bytes | None] = []
        self.off_buf = array("d")
        self.n_list: list[int] = []
        self.wheres: list[str] = []  # "file:line" of each record of the batch (errors name it)
        self.count = 0

    def add(self, d: dict[str, Any], where: str, tok_seg: bytes | None = None) -> None:
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
        self.wheres.append(where)
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
        wheres = self.wheres
        self.wheres = []
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
                i, bad = next((i, v) for i, v in enumerate(lst) if v is not None and not isinstance(v, (int, float)))
                raise RunInputError(f"{wheres[i]}: field {name!r} has non-numeric value {bad!r}") from None
        for name in TOKEN_COUNT_FIELDS:
            col = self.parts[name][-1]
            bad_rows = np.flatnonzero((col < 0) | (col > MAX_PLAUSIBLE_TOKENS))  # NaN (not observed) passes
            if bad_rows.size:
                i = int(bad_rows[0])
                raise RunInputError(f"{wheres[i]}: field {name!r} is {cols[_IDX[name]][i]!r}, not a plausible "
                                    f"token count (0 to {MAX_PLAUSIBLE_TOKENS})")
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
        try:
            tok, has_tok_list = self._tokens(n.tolist(), toks_col, segs, n, total)
        except _ImplausibleChunk as exc:
            i = int(np.searchsorted(np.cumsum(n), exc.position, side="right"))  # the record holding it
            raise RunInputError(f"{wheres[i]}: field 'chunk_tokens' holds {exc.value}, not a plausible "
                                f"token count (0 to {MAX_PLAUSIBLE_TOKENS})") from None
        del cols, toks_col
        has_tok = np.array(has_tok_list, dtype=bool)
        ptr, first, last, first_tok = chunk_bounds(n, off, tok, has_tok)
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

    def _tokens(self, lens: list[int], toks_col: tuple[Any, ...], segs: list[Any], n: np.ndarray, total: int) -> tuple[np.ndarray, list[bool]]:
        """Flat per-chunk token counts aligned with the offsets (0 where unknown), and exactness flags.

        ``lens`` are the numbers of chunk offsets of the batch's records.
        """
        if any(isinstance(t, list) for t in toks_col):
            # Some lines were not in compact form: decode their raw segments the slow way too.
            toks_col = tuple(orjson.loads(b"[" + g + b"]") if t is True else t for t, g in zip(toks_col, segs))
            has = [t is not None and len(t) == o for o, t in zip(lens, toks_col)]
            self.n_bad_chunk_tokens += sum(1 for o, t, h in zip(lens, toks_col, has) if t is not None and not h and o)
            wide = np.fromiter(
                chain.from_iterable(t if h else repeat(0, o) for o, t, h in zip(lens, toks_col, has)),
                dtype=np.float64, count=total,
            )
            _check_chunk_tokens(wide, np.arange(total))
            return wide.astype(np.int32), has
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
        _check_chunk_tokens(exact_vals, lambda: np.flatnonzero(np.repeat(has_arr, n)))
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


class _ImplausibleChunk(Exception):
    """A per-chunk token count outside 0..MAX_PLAUSIBLE_TOKENS at ``position`` of the batch's chunks."""

    def __init__(self, position: int, value: Any) -> None:
        super().__init__(position, value)
        self.position, self.value = position, value


def _check_chunk_tokens(values: np.ndarray, positions: Any) -> None:
    """Refuse a batch's per-chunk counts outside the plausible range (before they are narrowed to
    int16/int32, where they would wrap). ``positions``: each value's index among the batch's
    chunks (an array, or a function computing it, only on failure)."""
    if not values.size or (values.min() >= 0 and values.max() <= MAX_PLAUSIBLE_TOKENS):
        return
    j = int(np.flatnonzero((values < 0) | (values > MAX_PLAUSIBLE_TOKENS))[0])
    where = positions() if callable(positions) else positions
    v = values[j]
    raise _ImplausibleChunk(int(where[j]), int(v) if float(v).is_integer() else float(v))


def read_records(files: list[Path], keep_text: bool = False, v1: bool = False) -> tuple[dict[str, np.ndarray], dict[str, list[str]], list[str], list[str | None] | None]:
    """Stream records files into columns; returns (columns, categories, warnings, texts).

    ``v1``: the run's manifest says format_version 1, whose records name two fields without
    their unit (:data:`tokenswarm.record.V1_RENAMED_FIELDS`); they are read under today's names.
    """
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
            if v1:
                upgrade_v1(obj)
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


def _release_free_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``); a no-op elsewhere.

    Parsing frees hundreds of MB of per-batch objects and arrays that glibc would otherwise
    keep mapped, inflating the peak RSS of the analysis that follows.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
