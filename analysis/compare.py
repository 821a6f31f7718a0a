"""Compare a baseline run with a candidate run (e.g. speculative decoding on vs off).

Runs are matched by what was sent -- their request keys -- not by scenario name
(:func:`check_comparable`). Steps are matched by (kind, target) when both runs have load
steps (else by position), tasks by name; unmatched steps are listed, never dropped silently. For each matched step and task:

* speedup of per-request output tokens/s (ratio of medians, candidate / baseline) and of
  aggregate output tokens/s (ratio of step throughputs);
* TTFT, TPOT and E2E ratios (candidate / baseline) at p50, p95 and p99;

each with a 95 % percentile-bootstrap confidence interval (:mod:`analysis.stats`; both runs
resampled independently; seeded). A ratio whose percentile either run cannot support
(:mod:`analysis.samples`: n >= 10 / (1 - q); the speedups need the median's 20 successful
requests) is ``None`` with ``..._insufficient`` set: no ratio and no interval from two requests. Where the candidate's acceptance is higher than the
baseline's but aggregate throughput did not improve, a note names the step: the documented
high-concurrency collapse of speculative decoding (verification becomes compute-bound).

Output consistency joins requests by ``request_key`` plus occurrence index (the n-th
request with the same key by ``sent_at_s``). A pair of successful requests matches when its
texts are equal (when both runs kept ``output_text``) or else its ``output_sha256`` are
equal. For diverging pairs with text: first divergence position in characters and in
whitespace-separated words (not model tokens, which the records do not hold), and a
``difflib.SequenceMatcher.ratio`` similarity. Pairs where both requests used temperature 0
(greedy) and diverge are flagged: a candidate must not change greedy outputs.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Iterator

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.errors import NotComparableError
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.samples import MEDIAN_NEED
from tokenswarm.analysis.slo import ALL_TASKS
from tokenswarm.analysis.specdecode import mean_acceptance, spec_decode_tables
from tokenswarm.analysis.stats import bootstrap_percentiles, min_samples_for, percentiles_sorted, ratio_ci
from tokenswarm.analysis.step_windows import Window, windows
from tokenswarm.analysis.tables import quality_shares
from tokenswarm.names import PERCENTILE_KEY, SummaryMetric

RATIO_PERCENTILES: tuple[float, ...] = (50.0, 95.0, 99.0)
RATIO_METRICS: tuple[SummaryMetric, ...] = (names.TTFT, names.TPOT, names.E2E)
CONFIDENCE = 0.95


#: Runs are comparable when at least this share of the smaller run's distinct request keys is
#: also in the other run. Closed-loop arms send the same per-user prompt sequences, but the
#: faster arm gets further down them, so the overlap is judged against the smaller set.
MIN_SHARED_KEY_SHARE = 0.5


def traffic_overlap(base: Run, cand: Run) -> dict[str, Any]:
    """How much of what was sent is the same in both runs, by ``request_key`` (not by name)."""
    ka = np.unique(base["request_key"][base["request_key"] != b""])
    kb = np.unique(cand["request_key"][cand["request_key"] != b""])
    shared = int(np.intersect1d(ka, kb, assume_unique=True).size)
    smaller = min(ka.size, kb.size)
    return {"baseline_keys_count": int(ka.size), "candidate_keys_count": int(kb.size),
            "shared_keys_count": shared, "shared_key_share": shared / smaller if smaller else None}


def check_comparable(base: Run, cand: Run) -> int:
    """Raise :class:`NotComparableError` unless the runs sent the same requests.

    Runs are matched by what was sent (their request keys: payload, max_tokens and sampling),
    never by scenario name, so two differently named scenarios with identical traffic compare.
    Returns the number of distinct request keys in both runs.
    """
    ov = traffic_overlap(base, cand)
    shared, share = ov["shared_keys_count"], ov["shared_key_share"]
    if shared == 0:
        raise NotComparableError(
            f"{base.path} and {cand.path}: no request_key in common - the runs did not send the same requests "
            "(different seeds or datasets?)"
        )
    if share is not None and share < MIN_SHARED_KEY_SHARE:
        raise NotComparableError(
            f"{base.path} and {cand.path}: only {share:.0%} of the requests of the smaller run were also sent "
            f"by the other ({shared} of {min(ov['baseline_keys_count'], ov['candidate_keys_count'])} request keys, "
            f"at least {MIN_SHARED_KEY_SHARE:.0%} needed) - the runs did not send the same traffic"
        )
    return int(shared)


def _match_windows(wa: list[Window], wb: list[Window]) -> tuple[list[tuple[Window, Window]], list[str]]:
    pairs, unmatched = [], []
    if all(w.target is not None for w in wa + wb):
        by_key = {(w.kind, w.target): w for w in wb}
        for w in wa:
            other = by_key.pop((w.kind, w.target), None)
            if other is None:
                unmatched.append(f"baseline step {w.name} ({w.kind} {w.target:g}) has no candidate step")
            else:
                pairs.append((w, other))
        unmatched += [f"candidate step {w.name} ({w.kind} {w.target:g}) has no baseline step" for w in by_key.values()]
    else:
        for w, o in zip(wa, wb):
            pairs.append((w, o))
        if len(wa) != len(wb):
            unmatched.append(f"baseline has {len(wa)} step(s), candidate {len(wb)}: extra steps ignored")
    return pairs, unmatched


def _ci_keys(name: str, point: float | None, ci: tuple[float | None, float | None]) -> dict[str, Any]:
    return {f"{name}_ratio": point, f"{name}_ci_low_ratio": ci[0], f"{name}_ci_high_ratio": ci[1]}


def _clean(v: np.ndarray) -> np.ndarray:
    return np.sort(v[~np.isnan(v)])


def binned_throughput_reps(run: Run, mask: np.ndarray, tokens: np.ndarray, duration_s: float, n_boot: int,
                           rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of tokens/s: 1-second bins of tokens by completion time, resampled."""
    end = run["sent_at_s"][mask] + np.nan_to_num(run["e2e_ms"][mask], nan=0.0) / 1000.0
    n_bins = max(5, int(round(duration_s)))
    start = float(np.min(end)) if end.size else 0.0
    edges = start + np.linspace(0.0, duration_s, n_bins + 1)
    per_bin, _ = np.histogram(np.clip(end, edges[0], edges[-1]), bins=edges, weights=tokens)
    picks = rng.integers(0, n_bins, size=(n_boot, n_bins))
    reps: np.ndarray = per_bin[picks].sum(axis=1) / duration_s
    return reps


def _group_compare(
    ra: Run, rb: Run, ma: np.ndarray, mb: np.ndarray, dur_a: float | None, dur_b: float | None,
    n_boot: int, rng: np.random.Generator,
) -> dict[str, Any]:
    da, db = derived(ra), derived(rb)
    oka, okb = ma & da["ok"], mb & db["ok"]
    out: dict[str, Any] = {"baseline_ok_count": int(oka.sum()), "candidate_ok_count": int(okb.sum())}
    # A ratio needs what its percentile needs on both sides (analysis.samples); the median's
    # need also gates the throughput ratios: no ratio or interval from a handful of requests.
    enough = min(out["baseline_ok_count"], out["candidate_ok_count"]) >= MEDIAN_NEED
    out["speedup_insufficient"] = not enough
    # Per-request output tokens/s: ratio of medians.
    ta, tb = _clean(da["request_output_tps"][oka]), _clean(db["request_output_tps"][okb])
    if ta.size and tb.size and enough:
        pa, pb = percentiles_sorted(ta, [50.0])[0], percentiles_sorted(tb, [50.0])[0]
        reps_a = bootstrap_percentiles(ta, [50.0], n_boot, rng)[0]
        reps_b = bootstrap_percentiles(tb, [50.0], n_boot, rng)[0]
        out.update(_ci_keys("request_output_tps_p50_speedup", pb / pa if pa else None, ratio_ci(reps_b, reps_a, CONFIDENCE)))
        out["baseline_request_output_tps_p50_tokens_per_s"] = float(pa)
        out["candidate_request_output_tps_p50_tokens_per_s"] = float(pb)
    else:
        out.update(_ci_keys("request_output_tps_p50_speedup", None, (None, None)))
    # Aggregate throughput: sum of output tokens over the (fixed) steady window duration.
    toka = np.nan_to_num(ra["output_tokens"][oka], nan=0.0)
    tokb = np.nan_to_num(rb["output_tokens"][okb], nan=0.0)
    if toka.size and tokb.size and dur_a and dur_b and enough:
        tput_a, tput_b = toka.sum() / dur_a, tokb.sum() / dur_b
        # Resample time bins of completed tokens (not requests at a fixed count): throughput
        # varies with how many requests finish in the window as much as with their lengths.
        reps_a = binned_throughput_reps(ra, oka, toka, dur_a, n_boot, rng)
        reps_b = binned_throughput_reps(rb, okb, tokb, dur_b, n_boot, rng)
        out.update(_ci_keys("output_tokens_per_s_speedup", tput_b / tput_a if tput_a else None,
                            ratio_ci(reps_b, reps_a, CONFIDENCE)))
        out["baseline_output_tokens_per_s"] = float(tput_a)
        out["candidate_output_tokens_per_s"] = float(tput_b)
    else:
        out.update(_ci_keys("output_tokens_per_s_speedup", None, (None, None)))
        out["baseline_output_tokens_per_s"] = out["candidate_output_tokens_per_s"] = None
    for side, run, mask in (("baseline", ra, oka), ("candidate", rb, okb)):
        for name, share in quality_shares(run, mask).items():
            if name.endswith("_share"):
                out[f"{side}_{name}"] = share
    in_columns = {names.TTFT: True, names.TPOT: False, names.E2E: True}  # else derived (TPOT)
    for metric in RATIO_METRICS:
        col = metric.term  # the record field (or derived column) of the same name
        va = _clean((ra[col] if in_columns[metric] else da[col])[oka])
        vb = _clean((rb[col] if in_columns[metric] else db[col])[okb])
        if not (va.size and vb.size):
            for p in RATIO_PERCENTILES:
                out.update(_ci_keys(metric.stem(PERCENTILE_KEY[p]), None, (None, None)))
            continue
        pa, pb = percentiles_sorted(va, RATIO_PERCENTILES), percentiles_sorted(vb, RATIO_PERCENTILES)
        ba = bootstrap_percentiles(va, RATIO_PERCENTILES, n_boot, rng)
        bb = bootstrap_percentiles(vb, RATIO_PERCENTILES, n_boot, rng)
        for i, p in enumerate(RATIO_PERCENTILES):
            stem, key = metric.stem(PERCENTILE_KEY[p]), metric.key(PERCENTILE_KEY[p])
            need = min_samples_for(p)
            if min(va.size, vb.size) < need:  # too few samples on a side: no ratio, no interval
                out.update(_ci_keys(stem, None, (None, None)))
                out[f"{stem}_insufficient"] = True
                out[f"{stem}_needed_count"] = need
                out[f"baseline_{key}"] = out[f"candidate_{key}"] = None
                continue
            point = float(pb[i] / pa[i]) if pa[i] else None
            out.update(_ci_keys(stem, point, ratio_ci(bb[i], ba[i], CONFIDENCE)))
            out[f"baseline_{key}"] = float(pa[i])
            out[f"candidate_{key}"] = float(pb[i])
    return out


def _occurrence_index(keys: np.ndarray, sent_at_s: np.ndarray) -> np.ndarray:
    order = np.lexsort((sent_at_s, keys))
    sk = keys[order]
    new = np.ones(sk.size, dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    starts = np.maximum.accumulate(np.where(new, np.arange(sk.size), 0))
    occ = np.empty(sk.size, dtype=np.int64)
    occ[order] = np.arange(sk.size) - starts
    return occ


def _word_index(text: str, pos: int) -> int:
    """0-based index of the whitespace-separated word holding character ``pos``."""
    n = len(text[:pos].split())
    return n if pos == 0 or text[pos - 1].isspace() else n - 1


def _joined_pairs(base: Run, cand: Run) -> Iterator[tuple[int, int, bytes, int]]:
    """(base index, candidate index, request_key, occurrence) of every request both runs sent:
    the n-th send of a request_key in one run is paired with the n-th in the other."""
    occ_a = _occurrence_index(base["request_key"], base["sent_at_s"])
    occ_b = _occurrence_index(cand["request_key"], cand["sent_at_s"])
    index_a = {(k, int(o)): i for i, (k, o) in enumerate(zip(base["request_key"].tolist(), occ_a.tolist())) if k}
    for j, (k, o) in enumerate(zip(cand["request_key"].tolist(), occ_b.tolist())):
        i = index_a.get((k, int(o)))
        if i is not None:
            yield i, j, k, int(o)


def _text(run: Run, i: int) -> str | None:
    """The output text of request ``i`` when the run kept it."""
    return run.texts[i] if run.texts is not None else None


def _same_output(base: Run, cand: Run, i: int, j: int) -> bool | None:
    """Whether the two outputs are the same: by text when both runs kept it, else by digest;
    None when neither says (unverifiable)."""
    ta, tb = _text(base, i), _text(cand, j)
    if ta is not None and tb is not None:
        return ta == tb
    sha_a, sha_b = base["output_sha256"], cand["output_sha256"]
    if sha_a[i] and sha_b[j]:
        return bool(sha_a[i] == sha_b[j])
    return None


def _divergence_at(ta: str, tb: str, row: dict[str, Any]) -> int:
    """Where two texts part (character and word index, excerpts around it) into ``row``; the character index."""
    pos = len(os.path.commonprefix([ta, tb]))
    row["first_divergence_char_index"] = pos
    row["first_divergence_word_index"] = _word_index(ta, pos)
    row["baseline_excerpt"] = ta[max(0, pos - 20): pos + 60]
    row["candidate_excerpt"] = tb[max(0, pos - 20): pos + 60]
    return pos


def consistency(base: Run, cand: Run, similarity_limit: int = 2000, examples: int = 20) -> dict[str, Any]:
    """Join by request_key + occurrence and compare outputs (see module docstring)."""
    ok_a, ok_b = derived(base)["ok"], derived(cand)["ok"]
    temp_a, temp_b = base["temperature"], cand["temperature"]
    tasks_b = cand.categories["task"]
    with_text = base.texts is not None and cand.texts is not None
    joined = both_ok = matched = diverged = unverifiable = greedy_pairs = greedy_div = similarity_skipped = 0
    sims: list[float] = []
    first_chars: list[int] = []
    first_words: list[int] = []
    rows: list[dict[str, Any]] = []
    for i, j, k, o in _joined_pairs(base, cand):
        joined += 1
        if not (ok_a[i] and ok_b[j]):
            continue
        both_ok += 1
        same = _same_output(base, cand, i, j)
        if same is None:
            unverifiable += 1
            continue
        greedy = temp_a[i] == 0 and temp_b[j] == 0
        greedy_pairs += int(greedy)
        if same:
            matched += 1
            continue
        diverged += 1
        greedy_div += int(greedy)
        row: dict[str, Any] = {"request_key": k.decode(), "occurrence_index": o, "task": tasks_b[cand["task"][j]],
                               "greedy": bool(greedy), "first_divergence_char_index": None,
                               "first_divergence_word_index": None, "similarity_ratio": None}
        ta, tb = _text(base, i), _text(cand, j)
        if ta is not None and tb is not None:
            first_chars.append(_divergence_at(ta, tb, row))
            first_words.append(row["first_divergence_word_index"])
            if len(sims) < similarity_limit:
                row["similarity_ratio"] = difflib.SequenceMatcher(None, ta, tb).ratio()
                sims.append(row["similarity_ratio"])
            else:
                similarity_skipped += 1
        if len(rows) < examples or (greedy and sum(r["greedy"] for r in rows) < examples):
            rows.append(row)
    judged = matched + diverged
    mean_sim = None
    if with_text and judged and len(sims) == diverged:
        mean_sim = (matched + sum(sims)) / judged
    return {
        "joined_pairs_count": joined,
        "both_ok_pairs_count": both_ok,
        "judged_pairs_count": judged,
        "unverifiable_pairs_count": unverifiable,
        "exact_match_count": matched,
        "diverging_count": diverged,
        "exact_match_rate": matched / judged if judged else None,
        "greedy_pairs_count": greedy_pairs,
        "greedy_diverging_count": greedy_div,
        "greedy_divergence": greedy_div > 0,
        "texts_compared": with_text,
        "mean_similarity_ratio": mean_sim,
        "diverging_similarity_mean_ratio": float(np.mean(sims)) if sims else None,
        "similarity_skipped_count": similarity_skipped,
        "first_divergence_char_index_median_count": float(np.median(first_chars)) if first_chars else None,
        "first_divergence_word_index_median_count": float(np.median(first_words)) if first_words else None,
        "examples": rows,
    }


def compare_runs(
    base: Run, cand: Run, n_boot: int = 1000, seed: int = 0, k_override: int | None = None,
    similarity_limit: int = 2000,
) -> dict[str, Any]:
    """Compare two runs; see the module docstring for every number.

    Raises
    ------
    NotComparableError
        The runs did not send the same requests (too few shared ``request_key``).
    """
    shared = check_comparable(base, cand)
    rng = np.random.default_rng(seed)
    wa, na = windows(base)
    wb, nb = windows(cand)
    pairs, unmatched = _match_windows(wa, wb)
    spec_a = {(r["step_index"], r["task"]): r for r in spec_decode_tables(base, wa, k_override)["rows"]}
    spec_b = {(r["step_index"], r["task"]): r for r in spec_decode_tables(cand, wb, k_override)["rows"]}
    rows: list[dict[str, Any]] = []
    collapse: list[str] = []
    slower: list[str] = []  # every step and task (not only all tasks) where the candidate is significantly slower
    ta, tb = base.categories["task"], cand.categories["task"]
    for w_a, w_b in pairs:
        tasks = sorted(set(ta[c] for c in np.unique(base["task"][w_a.mask])) &
                       set(tb[c] for c in np.unique(cand["task"][w_b.mask])))
        for task in [ALL_TASKS] + tasks:
            ma = w_a.mask if task == ALL_TASKS else w_a.mask & (base["task"] == base.code("task", task))
            mb = w_b.mask if task == ALL_TASKS else w_b.mask & (cand["task"] == cand.code("task", task))
            row: dict[str, Any] = {
                "baseline_step_index": w_a.index, "candidate_step_index": w_b.index, "step_name": w_b.name,
                "step_kind": w_b.kind, "load_value": w_b.target, "task": task,
            }
            row.update(_group_compare(base, cand, ma, mb, w_a.duration_s, w_b.duration_s, n_boot, rng))
            acc_a, src_a = mean_acceptance(spec_a.get((w_a.index, task)))
            acc_b, src_b = mean_acceptance(spec_b.get((w_b.index, task)))
            row["baseline_mean_acceptance_length_tokens"] = acc_a
            row["candidate_mean_acceptance_length_tokens"] = acc_b
            row["acceptance_source"] = src_b
            speed = row.get("output_tokens_per_s_speedup_ratio")
            rose = acc_b is not None and acc_b > (acc_a if acc_a is not None else 1.0) + 1e-9
            if rose and speed is not None and speed <= 1.0 and task == ALL_TASKS:
                collapse.append(
                    f"Step {w_b.name}: acceptance rose (mean accepted length {acc_a or 1.0:.2f} -> {acc_b:.2f}, "
                    f"{src_b}) but aggregate throughput did not (x{speed:.2f}): speculative decoding does not pay off "
                    "at this load (the documented high-concurrency collapse: verification is compute-bound)."
                )
            for key, what in (("request_output_tps_p50_speedup", "per-request output tokens/s"),
                              ("output_tokens_per_s_speedup", "aggregate output tokens/s")):
                hi = row.get(f"{key}_ci_high_ratio")
                if hi is not None and hi < 1.0:
                    slower.append(f"Step {w_b.name}, task {task}: the candidate is slower in {what} "
                                    f"(x{row[f'{key}_ratio']:.2f}, 95 % CI below 1): it does not pay here.")
            rows.append(row)
    return {
        "baseline": {"path": str(base.path), "name": base.name, "run_id": base.manifest.run_id,
                     "records_count": len(base)},
        "candidate": {"path": str(cand.path), "name": cand.name, "run_id": cand.manifest.run_id,
                      "records_count": len(cand)},
        "scenario_name": base.manifest.scenario_name,
        "candidate_scenario_name": cand.manifest.scenario_name,
        "shared_request_keys_count": shared,
        "bootstrap": {"replicates_count": n_boot, "rng_seed_value": seed, "confidence_level_share": CONFIDENCE,
                      "method": "percentile bootstrap, runs resampled independently; quantiles via the exact "
                                "order-statistic (Beta) form, means by resampling or their normal limit"},
        "rows": rows,
        "unmatched_steps": unmatched,
        "collapse_notes": collapse,
        "slower_notes": slower,
        "consistency": consistency(base, cand, similarity_limit),
        "notes": sorted(set(na + nb)),
    }
