"""Speculative decoding: acceptance from three sources, per step (and per task where possible).

1. Server counters (``server_metrics.jsonl``; vLLM, llama.cpp's ``llamacpp:spec_decode_*`` of the
   same shape, SGLang and TGI as :func:`server_deltas` says): deltas of
   ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
   ``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}``
   (summed over ``engine`` labels, ``_created`` ignored) between the last scrape at or before
   the step's ``steady_at`` and the first scrape at or after its ``ended_at``. Acceptance rate =
   d_accepted / d_draft_tokens; mean acceptance length = 1 + d_accepted / d_drafts; per-position
   rate = d_per_pos[i] / d_drafts. Server-wide, so per step only (not per task); the window is
   slightly wider than the steady window (scrape spacing).
2. Per-request fields (``record.spec_decode``: vLLM ``metrics.speculative_decoding``, llama.cpp
   ``timings.draft_n``/``draft_n_accepted``, SGLang ``spec_tokens_details``, read into vLLM's
   names by :mod:`tokenswarm.wire.engine_fields`): the same
   ratios over the sums of ``num_accepted_draft_tokens``, ``num_draft_tokens`` and
   ``num_spec_steps`` of the selected requests. Exact and per task; the best source.
3. Chunk inference: tokens per streamed chunk, first chunk excluded (it follows prefill).
   With one verify step per chunk, tokens per chunk = 1 + accepted drafts, so the mean tokens
   per chunk estimates the mean acceptance length. Unreliable when the server coalesces
   several steps into one chunk (falls behind under load, ``--stream-interval > 1``): a chunk
   with more than K+1 tokens proves it and is flagged. Servers that stream one event per
   token (TGI, llama.cpp) show 1.0 regardless of acceptance. Requires exact per-chunk counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm.analysis.chunks import chunk_subset, token_histogram
from tokenswarm.analysis.loader import Run, ServerMetrics
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.slo import ALL_TASKS
from tokenswarm.analysis.step_windows import Window

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"

#: Share of chunks above K+1 tokens beyond which the chunk estimate is called unreliable.
COALESCED_SHARE_LIMIT = 0.01


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


#: Engines whose counters have vLLM's shape: (engine, drafts, draft tokens, accepted tokens).
COUNTER_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("vllm", DRAFTS, DRAFT_TOKENS, ACCEPTED),
    ("llama.cpp", "llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_draft_tokens_total",
     "llamacpp:spec_decode_num_accepted_tokens_total"),
)
SGLANG_VERIFY = "sglang:spec_verify_calls_total"
SGLANG_GENERATED = "sglang:generation_tokens_total"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
TGI_SKIPPED_SUM = "tgi_request_skipped_tokens_sum"
TGI_SKIPPED_COUNT = "tgi_request_skipped_tokens_count"


def _bracket(sm: ServerMetrics, start_s: float, end_s: float) -> tuple[int, int, list[str]]:
    """Indices of the last scrape at/before ``start_s`` and the first at/after ``end_s``."""
    t = sm.scraped_at_s
    notes = []
    before = np.nonzero(t <= start_s)[0]
    after = np.nonzero(t >= end_s)[0]
    i0 = int(before[-1]) if before.size else 0
    i1 = int(after[0]) if after.size else t.size - 1
    if not before.size:
        notes.append("no scrape before steady_at: first scrape used")
    if not after.size:
        notes.append("no scrape after ended_at: last scrape used")
    return i0, i1, notes


def server_deltas(sm: ServerMetrics | None, start_s: float | None, end_s: float | None) -> dict[str, Any]:
    """Counter deltas over ``[start_s, end_s]`` and the ratios derived from them.

    vLLM's and llama.cpp's counters have the same shape (drafts, draft tokens, accepted,
    accepted per position). SGLang has no accepted/draft counters: mean acceptance length is
    Δ``generation_tokens_total`` / Δ``spec_verify_calls_total`` and the acceptance rate is the
    mean of its ``spec_accept_rate`` gauge (most recent batch) over the window's scrapes. TGI's
    ``tgi_request_skipped_tokens`` summary gives accepted drafts per step: length = 1 +
    Δsum/Δcount. ``server_source`` names the engine whose counters were used.
    """
    empty = {
        "server_drafts_count": None, "server_draft_tokens_count": None, "server_accepted_tokens_count": None,
        "server_acceptance_rate": None, "server_mean_acceptance_length_tokens": None,
        "server_per_position_acceptance_rate": None, "server_num_spec_tokens_count": None,
        "server_scrape_before_s": None, "server_scrape_after_s": None, "server_source": None,
    }
    family = None
    if sm is not None:
        family = next((f for f in COUNTER_FAMILIES if sm.value(f[1]) is not None), None)
    other = sm is not None and (sm.value(SGLANG_VERIFY) is not None or sm.value(SGLANG_ACCEPT_RATE) is not None
                                or sm.value(TGI_SKIPPED_COUNT) is not None)
    if sm is None or (family is None and not other) or start_s is None or end_s is None:
        return {**empty, "server_note": "no spec-decode counters scraped"}
    t = sm.scraped_at_s
    i0, i1, notes = _bracket(sm, start_s, end_s)
    if i1 <= i0:
        return {**empty, "server_note": "fewer than two scrapes around the window"}

    def delta(arr: np.ndarray | None) -> float | None:
        if arr is None:
            return None
        v = float(arr[i1] - arr[i0])
        return None if np.isnan(v) or v < 0 else v  # NaN: series absent; < 0: counter reset

    base = {**empty, "server_scrape_before_s": float(t[i0]), "server_scrape_after_s": float(t[i1])}
    if family is None:
        return {**base, **_other_engines(sm, delta, t, start_s, end_s), "server_note": "; ".join(notes) or None}
    engine, drafts_name, draft_tok_name, acc_name = family
    drafts, draft_tok, acc = delta(sm.value(drafts_name)), delta(sm.value(draft_tok_name)), delta(sm.value(acc_name))
    per_pos = [delta(sm.per_pos[p]) for p in sorted(sm.per_pos) if p >= 0]
    out = {
        **base,
        "server_source": engine,
        "server_drafts_count": drafts,
        "server_draft_tokens_count": draft_tok,
        "server_accepted_tokens_count": acc,
        "server_acceptance_rate": _ratio(acc, draft_tok),
        "server_mean_acceptance_length_tokens": None if acc is None or not drafts else 1.0 + acc / drafts,
        "server_per_position_acceptance_rate": [_ratio(v, drafts) for v in per_pos] if per_pos else None,
        "server_num_spec_tokens_count": len(per_pos) or None,
        "server_note": "; ".join(notes) or None,
    }
    if drafts is None or draft_tok is None or acc is None:
        out["server_note"] = "; ".join(notes + ["a counter went backwards (server restart?) or is missing"])
    return out


def _other_engines(sm: ServerMetrics, delta: Any, t: np.ndarray, start_s: float, end_s: float) -> dict[str, Any]:
    """SGLang (verify calls + gauges) or TGI (skipped-tokens summary) acceptance over a window."""
    if sm.value(TGI_SKIPPED_COUNT) is not None:
        steps, skipped = delta(sm.value(TGI_SKIPPED_COUNT)), delta(sm.value(TGI_SKIPPED_SUM))
        return {"server_source": "tgi", "server_drafts_count": steps, "server_accepted_tokens_count": skipped,
                "server_mean_acceptance_length_tokens": 1.0 + skipped / steps if steps and skipped is not None else None}
    verify, generated = delta(sm.value(SGLANG_VERIFY)), delta(sm.value(SGLANG_GENERATED))
    inside = (t >= start_s) & (t <= end_s)
    rate = sm.value(SGLANG_ACCEPT_RATE)
    rate_mean = float(np.nanmean(rate[inside])) if rate is not None and inside.any() and not np.isnan(rate[inside]).all() else None
    length = _ratio(generated, verify)
    if length is None:
        gauge = sm.value(SGLANG_ACCEPT_LENGTH)
        if gauge is not None and inside.any() and not np.isnan(gauge[inside]).all():
            length = float(np.nanmean(gauge[inside]))
    return {"server_source": "sglang", "server_drafts_count": verify, "server_acceptance_rate": rate_mean,
            "server_mean_acceptance_length_tokens": length}


def per_request(run: Run, mask: np.ndarray) -> dict[str, Any]:
    """Acceptance from ``record.spec_decode`` of the selected requests."""
    steps = run["sd_num_spec_steps"][mask]
    acc = run["sd_num_accepted_tokens"][mask]
    draft = run["sd_num_draft_tokens"][mask]
    mal = run["sd_mean_acceptance_length"][mask]
    have = ~np.isnan(steps) & ~np.isnan(acc)
    n = int(have.sum())
    out: dict[str, Any] = {"request_stats_count": int((~np.isnan(mal) | have).sum())}
    s_steps, s_acc = float(steps[have].sum()), float(acc[have].sum())
    d_have = have & ~np.isnan(draft)
    s_draft = float(draft[d_have].sum())
    out["request_spec_steps_count"] = s_steps if n else None
    out["request_accepted_tokens_count"] = s_acc if n else None
    out["request_draft_tokens_count"] = s_draft if d_have.any() else None
    out["request_acceptance_rate"] = _ratio(float(acc[d_have].sum()), s_draft) if d_have.any() else None
    if n and s_steps > 0:
        out["request_mean_acceptance_length_tokens"] = 1.0 + s_acc / s_steps
    elif (~np.isnan(mal)).any():
        # Only the per-request mean was sent: unweighted mean over requests (noted in docs).
        out["request_mean_acceptance_length_tokens"] = float(np.nanmean(mal))
    else:
        out["request_mean_acceptance_length_tokens"] = None
    return out


def spec_k(run: Run, override: int | None = None) -> tuple[int | None, str | None]:
    """Number of speculative tokens K and where it came from."""
    if override:
        return int(override), "command line"
    k = run["sd_num_spec_tokens"]
    if (~np.isnan(k)).any():
        return int(np.nanmax(k)), "per-request num_spec_tokens"
    sm = run.server_metrics
    if sm is not None and sm.per_pos:
        positions = [p for p in sm.per_pos if p >= 0]
        if positions:
            return max(positions) + 1, "server per-position counter labels"
    return None, None


def chunk_inference(counts: np.ndarray, k: int | None) -> dict[str, Any]:
    """Mean accepted length estimate from a tokens-per-chunk histogram (first chunk excluded).

    ``counts[j]`` is the number of chunks carrying ``j`` tokens (exact counts only).
    """
    total = int(counts.sum())
    out: dict[str, Any] = {"chunks_count": total}
    reasons: list[str] = []
    if total == 0:
        out.update({"chunk_mean_tokens_per_chunk_tokens": None, "tokens_per_chunk_histogram": [],
                    "chunks_over_k_plus_1_count": None, "chunks_over_k_plus_1_share": None,
                    "chunk_estimate_reliable": False,
                    "chunk_estimate_notes": ["no exact per-chunk token counts (chunk_tokens null)"]})
        return out
    sizes = np.arange(counts.size)
    out["chunk_mean_tokens_per_chunk_tokens"] = float(np.dot(sizes, counts) / total)
    out["tokens_per_chunk_histogram"] = [
        {"chunk_size_tokens": int(j), "chunks_count": int(c)} for j, c in enumerate(counts) if c
    ]
    if k is not None:
        over = int(counts[k + 2:].sum())
        out["chunks_over_k_plus_1_count"] = over
        out["chunks_over_k_plus_1_share"] = over / total
        if over / total > COALESCED_SHARE_LIMIT:
            reasons.append(
                f"{over / total:.1%} of chunks carry more than K+1={k + 1} tokens: the server coalesced "
                "steps into chunks (fell behind under load or --stream-interval > 1); the estimate is biased upward"
            )
    else:
        out["chunks_over_k_plus_1_count"] = None
        out["chunks_over_k_plus_1_share"] = None
        reasons.append("K (num_speculative_tokens) unknown: coalesced chunks cannot be detected")
    if counts.size <= 2:
        reasons.append("every chunk carries one token: the server streams token by token or speculation is off")
    out["chunk_estimate_reliable"] = not reasons
    out["chunk_estimate_notes"] = reasons
    return out


#: a chunk-size estimate further than this from the per-request mean accepted length is unreliable
CHUNK_VS_REQUEST_LIMIT = 0.15


def _check_against_requests(row: dict[str, Any]) -> None:
    """Mark the chunk estimate unreliable where the server's own per-request numbers contradict it."""
    req, chunk = row.get("request_mean_acceptance_length_tokens"), row.get("chunk_mean_tokens_per_chunk_tokens")
    if req and chunk and abs(chunk - req) / req > CHUNK_VS_REQUEST_LIMIT:
        row["chunk_estimate_reliable"] = False
        row["chunk_estimate_notes"] = [*row.get("chunk_estimate_notes", []),
                                       f"the chunk-size estimate ({chunk:.2f}) disagrees with the per-request mean "
                                       f"accepted length ({req:.2f}) by more than {CHUNK_VS_REQUEST_LIMIT:.0%}"]


def spec_decode_tables(run: Run, wins: list[Window], k_override: int | None = None) -> dict[str, Any]:
    """Per step (server counters) and per step and task (per-request fields, chunk inference)."""
    d = derived(run)
    k, k_source = spec_k(run, k_override)
    tasks = run.categories["task"]
    rows: list[dict[str, Any]] = []
    hists = run.cache.get("token_histograms", {})
    for w in wins:
        server = server_deltas(run.server_metrics, w.start_s, w.end_s)
        req_all = w.mask & d["ok"]
        codes = sorted(np.unique(run["task"][w.mask]), key=lambda c: tasks[c])
        if not all((w.index, int(c)) in hists for c in codes):
            step_chunks = chunk_subset(run, req_all, with_gaps=False)
            for c in codes:
                sel = step_chunks["task"] == c
                hists[(w.index, int(c))] = token_histogram({kk: v[sel] for kk, v in step_chunks.items()})
            del step_chunks
        task_hists = [hists[(w.index, int(c))] for c in codes]
        size = max([h.size for h in task_hists] + [0])
        all_hist = np.zeros(size, dtype=np.int64)
        for h in task_hists:
            all_hist[:h.size] += h
        groups = [(ALL_TASKS, req_all, all_hist)]
        groups += [(tasks[c], req_all & (run["task"] == c), h) for c, h in zip(codes, task_hists)]
        for task_name, req, hist in groups:
            row: dict[str, Any] = {**w.header(), "task": task_name}
            if task_name == ALL_TASKS:
                row.update(server)
            row.update(per_request(run, req))
            row.update(chunk_inference(hist, k))
            _check_against_requests(row)
            rows.append(row)
    any_data = any(
        (r.get("server_drafts_count") or r.get("request_stats_count")) for r in rows
    ) or any((r.get("chunk_mean_tokens_per_chunk_tokens") or 1.0) > 1.0 for r in rows)
    return {"num_spec_tokens_count": k, "num_spec_tokens_source": k_source, "rows": rows, "observed": bool(any_data)}


def mean_acceptance(row: dict[str, Any] | None, mark_unreliable: bool = False) -> tuple[float | None, str | None]:
    """Best available mean acceptance length of a spec-decode row, and its source:
    per-request figures, else the server's counters, else the chunk sizes.

    ``mark_unreliable`` labels a chunk-size estimate the row calls unreliable as
    ``"chunk sizes (unreliable)"`` (the study's verdict table shows the source to the reader).
    """
    if row is None:
        return None, None
    for key, src in (("request_mean_acceptance_length_tokens", "per-request"),
                     ("server_mean_acceptance_length_tokens", "server counters"),
                     ("chunk_mean_tokens_per_chunk_tokens", "chunk sizes")):
        if row.get(key) is not None:
            if mark_unreliable and src == "chunk sizes" and not row.get("chunk_estimate_reliable"):
                return float(row[key]), "chunk sizes (unreliable)"
            return float(row[key]), src
    return None, None
