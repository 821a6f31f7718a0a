"""tokenswarm against a real vLLM engine, with and without n-gram speculative decoding.

Real Locust runs (subprocesses, as a user runs them) against vLLM CPU serving the tiny test
model, then the real ``tokenswarm report`` / ``tokenswarm compare`` on the run directories.
The test model never emits its end-of-sequence token and decodes greedily along a fixed
successor chain, so at temperature 0 every answer is known in advance: it has exactly
``max_tokens`` tokens and its text is the decoded chain. That makes the server's numbers
checkable from outside the server.

Needs ``vllm`` importable by ``$TOKENSWARM_VLLM_PYTHON`` (or this interpreter); skipped
otherwise. Two server starts (about a minute each) dominate the run time; see conftest.py.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import pytest

from tests.helpers.runs import ROOT, read_manifest, read_records
from tests.real_engine.vllm_runs import CLASSES, PROBE_PROMPT, PROBE_TOKENS, SKIP_REASON, SPEC_K, EngineRuns
from tokenswarm.testmodel.build import greedy_chain, load_manifest

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timeout(900),  # the first test pays for a server start and its runs
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]

GENERATED = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
SUCCESS = "vllm:request_success_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"


# ----------------------------------------------------------------------------- helpers

def ran(engine: EngineRuns, name: str) -> Path:
    """The run directory of ``name``, after checking the Locust process succeeded."""
    res = engine.results[name]
    assert res.returncode == 0, (
        f"{name} run against {'n-gram' if engine.speculative else 'baseline'} vLLM exited "
        f"{res.returncode}\n{res.stderr[-3000:]}\n--- vLLM log tail ---\n{engine.log_tail}"
    )
    return engine.dirs[name]


def scrapes(run_dir: Path) -> list[dict]:
    lines = (run_dir / "server_metrics.jsonl").read_text().splitlines()
    return [s for s in map(json.loads, lines) if s["source"] == "target" and s["error"] is None]


def total(scrape: dict, name: str) -> float | None:
    """A metric summed over its label sets (engine, model_name, ...); None when absent."""
    values = [s["value"] for s in scrape["samples"] if s["name"] == name]
    return sum(values) if values else None


def run_delta(run_dir: Path, name: str) -> float | None:
    """Counter change between the first scrape (taken at run start, before any request of the
    run: warm-up requests sent earlier are excluded) and the final one (after the last
    in-flight request finished)."""
    s = scrapes(run_dir)
    assert len(s) >= 2, f"{run_dir}: fewer than two successful scrapes"
    first, last = total(s[0], name), total(s[-1], name)
    return None if first is None or last is None else last - first


@cache
def greedy_chain_text(model_dir: Path, n_tokens: int) -> str:
    """The text of the first ``n_tokens`` greedy tokens after the chat template (every chat
    prompt ends with the same ``<|assistant|>\\n`` tokens, so every greedy answer is a prefix
    of one chain)."""
    from tokenizers import Tokenizer

    from tokenswarm.testmodel.build import greedy_chain, load_manifest

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    last = tok.encode("<s><|user|>\nx</s>\n<|assistant|>\n", add_special_tokens=False).ids[-1]
    return tok.decode(greedy_chain(load_manifest(model_dir)["successor"], last, n_tokens))


def later_chunks(records: list[dict]) -> list[int]:
    """Tokens per content chunk, first chunk of each request excluded (it follows prefill)."""
    return [n for r in records for n in (r["chunk_tokens"] or [])[1:]]


def steady_ok(records: list[dict], step: int) -> list[dict]:
    return [r for r in records if r["step"] == step and r["phase"] == "steady" and r["outcome"] == "ok"]


def step_throughputs(run_dir: Path) -> dict[int, dict[str, float]]:
    """Per step: the aggregate output tokens/s (its successful steady requests' tokens over the
    manifest's steady window) and the median per-request output tokens/s (tokens / e2e), from
    the run directory alone."""
    records = read_records(run_dir)
    out = {}
    for window in read_manifest(run_dir)["steps"]:
        ok = steady_ok(records, window["index"])
        assert ok, f"{run_dir}: no successful steady request in step {window['index']}"
        out[window["index"]] = {
            "output_tokens_per_s": sum(r["output_tokens"] for r in ok) / (window["ended_at"] - window["steady_at"]),
            "request_output_tps_p50": statistics.median(r["output_tokens"] / (r["e2e_ms"] / 1000.0) for r in ok)}
    return out


def tokenswarm_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenswarm", *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)


def report_summary(run_dir: Path) -> dict:
    """``tokenswarm report RUN_DIR`` (the real CLI), then its summary.json."""
    out = run_dir / "report"
    if not (out / "summary.json").exists():
        res = tokenswarm_cli("report", str(run_dir), "--no-plots", "--quiet", "--out", str(out))
        assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def spec_row(summary: dict, step: int) -> dict:
    (row,) = [r for r in summary["spec_decode"]["rows"] if r["step_index"] == step and r["task"] == "all"]
    return row


@pytest.fixture(params=["baseline", "ngram"])
def engine(request) -> EngineRuns:
    return request.getfixturevalue(f"{request.param}_engine")


@pytest.fixture(scope="module")
def comparison(baseline_engine, ngram_engine, tmp_path_factory):
    """``tokenswarm compare`` of the two ``compare`` runs (same scenario and seed, T=0)."""
    base, cand = ran(baseline_engine, "compare"), ran(ngram_engine, "compare")
    out = tmp_path_factory.mktemp("compare")
    res = tokenswarm_cli("compare", str(base), str(cand), "--no-plots", "--out", str(out))
    return res, json.loads((out / "summary.json").read_text())


# ----------------------------------------------------------------------------- tests

def test_every_traffic_class_streams_exactly_what_vllm_generated(engine, engine_model_dir):
    run_dir = ran(engine, "classes")
    records = read_records(run_dir)
    manifest = read_manifest(run_dir)
    assert manifest["complete"] and manifest["totals"]["records_lost"] == 0
    assert manifest["totals"]["records_received"] == len(records) == manifest["totals"]["requests_started"]
    assert [r["outcome"] for r in records] == ["ok"] * len(records), Counter(r["error"] for r in records)
    by_task = Counter(r["task"] for r in records)
    assert set(by_task) == set(CLASSES) and min(by_task.values()) >= 2, by_task
    for r in records:
        where = f"{r['task']} request {r['response_id']}"
        assert r["response_id"].startswith("chatcmpl-"), where
        assert not r["tokens_estimated"] and r["prompt_tokens"] > 0, where
        # The model never emits EOS: vLLM generated exactly max_tokens and said so in usage.
        assert r["finish_reason"] == "length" and r["output_tokens"] == r["max_tokens"], where
        assert len(r["chunk_tokens"]) == len(r["chunk_offsets_ms"]) and min(r["chunk_tokens"]) >= 1, where
        assert sum(r["chunk_tokens"]) == r["output_tokens"], where
        # ...and the streamed text is exactly those tokens of the greedy chain, no more, no less.
        assert r["output_text"] == greedy_chain_text(engine_model_dir, r["output_tokens"]), where
    sessions = defaultdict(list)
    for r in sorted(records, key=lambda r: r["sent_at_s"]):
        if r["task"] == "multi_turn":
            sessions[r["session_id"]].append((r["turn"], r["prompt_tokens"]))
    complete = [s for s in sessions.values() if len(s) == 3]
    assert complete, sessions
    for turns in complete:
        # each turn re-sends the history with vLLM's real replies: the prompt grows every turn
        assert [t for t, _ in turns] == [0, 1, 2] and turns[0][1] < turns[1][1] < turns[2][1], turns


@pytest.mark.parametrize("name", ["classes", "compare"])
def test_server_counter_deltas_over_a_run_equal_the_records(engine, name):
    run_dir = ran(engine, name)
    records = read_records(run_dir)
    ok = [r for r in records if r["outcome"] == "ok"]
    assert len(ok) == len(records) > 0
    # vLLM counts every generated token once; tokenswarm recorded every request of the run.
    assert run_delta(run_dir, GENERATED) == sum(r["output_tokens"] for r in ok)
    assert run_delta(run_dir, PROMPT) == sum(r["prompt_tokens"] for r in ok)
    assert run_delta(run_dir, SUCCESS) == len(ok)
    spec_families = {total(scrapes(run_dir)[-1], n) is not None for n in (ACCEPTED, DRAFTS)}
    assert spec_families == {engine.speculative}, "spec_decode series exist only with speculation"
    if engine.speculative:
        # Greedy on a cycling model: drafts come after the output starts repeating, and most
        # output tokens are accepted drafts.
        assert run_delta(run_dir, ACCEPTED) > sum(r["output_tokens"] for r in ok) / 2


def test_vllm_greedy_output_follows_the_cycle_identically_with_and_without_ngram_speculation(
    engine_model_dir, baseline_engine, ngram_engine
):
    from tokenizers import Tokenizer

    manifest = load_manifest(engine_model_dir)
    tok = Tokenizer.from_file(str(engine_model_dir / "tokenizer.json"))
    prompt_ids = tok.encode(f"<s><|user|>\n{PROBE_PROMPT}</s>\n<|assistant|>\n", add_special_tokens=False).ids
    expected = greedy_chain(manifest["successor"], prompt_ids[-1], PROBE_TOKENS)
    base, spec = baseline_engine.probe, ngram_engine.probe
    assert base["ids"] == expected, "vLLM's greedy output is the successor chain the weights encode"
    assert spec["ids"] == base["ids"], "n-gram speculation must not change greedy output"
    # Chunk sizes are compared by median: a busy machine makes vLLM merge steps now and then (each
    # server is asked again when its chunks show merged steps: vllm_runs.probe, steps_merged).
    assert base["accepted_after"] is None, "a server without speculation exposes no spec_decode counters"
    assert statistics.median(base["chunk_tokens"]) == 1, base["chunk_tokens"]
    assert statistics.median(spec["chunk_tokens"]) > 1, f"accepted drafts arrive together: {spec['chunk_tokens']}"
    accepted_tokens = (spec["accepted_after"] or 0.0) - (spec["accepted_before"] or 0.0)
    assert accepted_tokens > len(expected) / 2, "most of the output came from accepted drafts"


def test_multi_token_chunks_come_from_speculation_not_from_plain_streaming(baseline_engine, ngram_engine):
    # vLLM merges several engine steps into one chunk when its API server falls behind (a busy
    # 2-core machine, higher concurrency), with or without speculation, so "never" cannot be
    # asserted. What holds: at concurrency 1 a baseline chunk is one token (median 1, few
    # exceptions), while with speculation most chunks carry the bonus token plus accepted drafts.
    base = later_chunks(steady_ok(read_records(ran(baseline_engine, "compare")), step=0))
    spec = later_chunks(steady_ok(read_records(ran(ngram_engine, "compare")), step=0))
    assert base and spec
    assert statistics.median(base) == 1, Counter(base)
    assert sum(n > 1 for n in base) / len(base) < 0.2, Counter(base)
    assert statistics.median(spec) > 1.5, Counter(spec)
    assert sum(n > 1 for n in spec) / len(spec) > 0.5, Counter(spec)
    # Every class, with one user each (concurrency 4): speculation still shows in every class.
    for task in CLASSES:
        base_t = later_chunks([r for r in read_records(ran(baseline_engine, "classes")) if r["task"] == task])
        spec_t = later_chunks([r for r in read_records(ran(ngram_engine, "classes")) if r["task"] == task])
        assert statistics.median(spec_t) > 1.5, (task, Counter(spec_t))
        assert statistics.mean(spec_t) > statistics.mean(base_t), (task, Counter(base_t), Counter(spec_t))


def test_report_shows_acceptance_from_the_spec_decode_counters(baseline_engine, ngram_engine):
    spec = report_summary(ran(ngram_engine, "compare"))
    assert spec["spec_decode"]["observed"] is True
    assert spec["spec_decode"]["num_spec_tokens_count"] == SPEC_K  # from the `position` labels
    for step in (0, 1):
        row = spec_row(spec, step)
        assert row["server_note"] is None, row["server_note"]
        assert row["server_drafts_count"] > 0
        # Greedy decoding of a cycling model: the n-gram drafts are (nearly) all accepted.
        assert row["server_acceptance_rate"] > 0.9, row
        assert 3.5 <= row["server_mean_acceptance_length_tokens"] <= SPEC_K + 1, row
        assert len(row["server_per_position_acceptance_rate"]) == SPEC_K
    base = report_summary(ran(baseline_engine, "compare"))
    row = spec_row(base, 0)
    assert row["server_acceptance_rate"] is None and row["server_mean_acceptance_length_tokens"] is None
    assert row["server_note"] == "no spec-decode counters scraped"


def test_chunk_estimate_of_acceptance_agrees_with_the_counters_at_concurrency_1(ngram_engine):
    row = spec_row(report_summary(ran(ngram_engine, "compare")), step=0)
    counters = row["server_mean_acceptance_length_tokens"]
    chunks = row["chunk_mean_tokens_per_chunk_tokens"]
    # They measure different things and agree only roughly: the counters average over steps
    # that had a draft, while the chunk mean also counts the one-token chunks of the first ~10
    # tokens of each answer (nothing to look up before the output repeats: no draft) and the
    # last chunk cut short by max_tokens (both pull it below the counters), plus any steps the
    # server merged into one chunk (pushes it above). With 192-token answers at concurrency 1
    # the gap is about 10-15 %; 25 % leaves room for a busy machine.
    assert chunks == pytest.approx(counters, rel=0.25), row
    assert row["chunks_over_k_plus_1_share"] < 0.05, row["tokens_per_chunk_histogram"]


def test_compare_finds_identical_greedy_outputs_the_records_speedups_and_acceptance(
        comparison, baseline_engine, ngram_engine):
    res, summary = comparison
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    c = summary["consistency"]
    assert c["texts_compared"] and c["judged_pairs_count"] >= 5, c
    assert c["exact_match_rate"] == 1.0 and c["diverging_count"] == 0, c["examples"]
    assert c["greedy_pairs_count"] == c["judged_pairs_count"]
    assert "100.00% exact match" in res.stdout
    rows = {r["step_name"]: r for r in summary["rows"] if r["task"] == "all"}
    assert set(rows) == {"c1", "c4"}
    # The speedups are the records' own figures, recomputed here from the two run directories.
    # Their direction (about 2x, docs/vllm-example-report.md) is a ratio of two runs made one
    # after the other, which holds only while the machine's load is the same for both: it is
    # asserted in the timing stage (test_vllm_speedup.py). Beside the other workers this
    # engine runs at nice 19 and once measured 0.87x at c1 (project CI, 2026-12-06).
    base_steps = step_throughputs(ran(baseline_engine, "compare"))
    cand_steps = step_throughputs(ran(ngram_engine, "compare"))
    for step, name in enumerate(("c1", "c4")):
        row = rows[name]
        base, cand = base_steps[step], cand_steps[step]
        assert row["baseline_output_tokens_per_s"] == pytest.approx(base["output_tokens_per_s"], rel=1e-9), row
        assert row["candidate_output_tokens_per_s"] == pytest.approx(cand["output_tokens_per_s"], rel=1e-9), row
        assert row["output_tokens_per_s_speedup_ratio"] == pytest.approx(
            cand["output_tokens_per_s"] / base["output_tokens_per_s"], rel=1e-9), row
        assert row["request_output_tps_p50_speedup_ratio"] == pytest.approx(
            cand["request_output_tps_p50"] / base["request_output_tps_p50"], rel=1e-9), row
        assert row["request_output_tps_p50_speedup_ci_low_ratio"] is not None, row  # 20+ requests a side
    c1 = rows["c1"]
    assert c1["acceptance_source"] == "server counters"
    assert c1["candidate_mean_acceptance_length_tokens"] >= 3.5
    assert c1["baseline_mean_acceptance_length_tokens"] < 1.5  # the baseline's chunk sizes
    assert summary["shared_request_keys_count"] >= 5


def test_requests_vllm_rejects_become_http_error_records_with_its_message(baseline_engine):
    run_dir = ran(baseline_engine, "errors")
    records = read_records(run_dir)
    by_kind = defaultdict(list)
    for r in records:
        by_kind[(r["extra"] or {}).get("abnormal") or r["task"]].append(r)
    expected = {
        "invalid_params": "temperature must be non-negative, got -1.0",
        "huge_max_tokens": "max_tokens=10000000 cannot be greater than max_model_len=2048",
    }
    assert set(by_kind) == {"qa", *expected}, {k: len(v) for k, v in by_kind.items()}
    for kind, message in expected.items():
        for r in by_kind[kind]:
            assert (r["outcome"], r["http_status"]) == ("http_error", 400), r
            assert r["error"].startswith("HTTP 400: BadRequestError: ") and message in r["error"], r["error"]
            assert r["ttft_ms"] is None and r["output_tokens"] is None and r["chunk_offsets_ms"] == []
    assert all(r["outcome"] == "ok" for r in by_kind["qa"])
    # Rejected before any engine step: vLLM counted only the successful requests.
    assert run_delta(run_dir, SUCCESS) == len(by_kind["qa"])
    assert run_delta(run_dir, GENERATED) == sum(r["output_tokens"] for r in by_kind["qa"])
    errors = report_summary(run_dir)["errors"]
    reported = {e["error"] for e in errors if e["task"] == "all" and e["http_status"] == 400}
    assert all(any(m in e for e in reported) for m in expected.values()), reported
