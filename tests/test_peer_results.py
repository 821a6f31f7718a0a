"""benchmarks/peer_tools.py: the peers' result files are read as each tool defines its figures, and the
truth's ITL is computed under each tool's definition.

The samples are cut from the files the four tools wrote in a real ``peers.py --profiles spec --rounds 1
--seconds 15`` run on 2026-12-02 (vLLM 0.32 ``result.json``, AIPerf 0.13.0
``profile_export_aiperf.json``, GuideLLM 0.8.1 JSON output, inference-perf 0.7.0
``summary_lifecycle_metrics.json``), keeping the fields around the ones read. No tool is run here.
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("peer_tools", ROOT / "benchmarks" / "peer_tools.py")
peer_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_tools)

VLLM = {"completed": 1021, "max_concurrency": 32, "median_ttft_ms": 51.38194699975429,
        "p99_ttft_ms": 118.12760740103838, "median_itl_ms": 9.964866998416255, "p99_itl_ms": 19.921043220019804,
        "median_tpot_ms": 3.311144464575813}
AIPERF = {"aiperf_version": "0.13.0", "request_count": {"unit": "requests", "avg": 835.0},
          "time_to_first_token": {"unit": "ms", "avg": 79.61923800598801, "p50": 56.685106,
                                  "p99": 240.9127572199998, "count": 835},
          "inter_token_latency": {"unit": "ms", "avg": 3.371254191098118, "p50": 3.339229047244094,
                                  "p99": 4.742825744094488, "count": 835}}
GUIDELLM = {"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": [{"metrics": {
    "request_totals": {"successful": 701, "errored": 0, "incomplete": 27, "total": 728},
    "time_to_first_token_ms": {"successful": {"median": 64.05115127563477, "count": 701, "percentiles": {
        "p50": 64.05115127563477, "p99": 308.5620403289795}}},
    "inter_token_latency_ms": {"successful": {"median": 3.276500176257036, "count": 89027, "percentiles": {
        "p50": 3.276500176257036, "p99": 4.238920887624185}}}}}]}
INFERENCE_PERF = {"successes": {"count": 1021, "latency": {
    "time_to_first_token": {"mean": 0.0728862407159331, "min": 0.04016879099981452, "max": 1.0733898100006627,
                            "median": 0.042906448999929125, "p99": 1.06618724919972},
    "inter_token_latency": {"mean": 0.0012185537093137757, "min": 0.0, "max": 0.3396220819995506,
                            "median": 0.0, "p99": 0.016480162781408576}}}, "failures": {"count": 0}}

SAMPLES = {
    "vllm": (VLLM, {"ttft_p50": 51.38194699975429, "ttft_p99": 118.12760740103838, "itl_p50": 9.964866998416255}),
    "aiperf": (AIPERF, {"ttft_p50": 56.685106, "ttft_p99": 240.9127572199998, "itl_p50": 3.339229047244094}),
    "guidellm": (GUIDELLM, {"ttft_p50": 64.05115127563477, "ttft_p99": 308.5620403289795,
                            "itl_p50": 3.276500176257036}),
    # inference-perf reports seconds: read as ms
    "inference-perf": (INFERENCE_PERF, {"ttft_p50": 42.906448999929125, "ttft_p99": 1066.18724919972,
                                        "itl_p50": 0.0}),
}


@pytest.mark.parametrize("tool", sorted(SAMPLES))
def test_each_tools_results_file_gives_its_ttft_p50_p99_and_itl_p50_in_ms(tool, tmp_path):
    doc, expected = SAMPLES[tool]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    assert peer_tools.read_result(tool, path) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tool", sorted(SAMPLES))
def test_a_results_file_without_a_figure_is_an_error_naming_the_file_and_the_field(tool, tmp_path):
    doc, _ = SAMPLES[tool]
    doc = json.loads(json.dumps(doc))
    # the TTFT block each tool keeps its percentiles in
    if tool == "vllm":
        del doc["p99_ttft_ms"]
    elif tool == "aiperf":
        del doc["time_to_first_token"]["p99"]
    elif tool == "guidellm":
        del doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
    else:
        del doc["successes"]["latency"]["time_to_first_token"]["p99"]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(peer_tools.ResultError, match=r"result\.json: no field '.*p99.*'"):
        peer_tools.read_result(tool, path)


def test_a_missing_or_torn_results_file_is_an_error_not_a_row_of_zeros(tmp_path):
    with pytest.raises(peer_tools.ResultError, match="no results file"):
        peer_tools.read_result("aiperf", tmp_path / "absent.json")
    torn = tmp_path / "torn.json"
    torn.write_text('{"median_ttft_ms": 5')
    with pytest.raises(peer_tools.ResultError, match="not JSON"):
        peer_tools.read_result("vllm", torn)
    null = tmp_path / "null.json"
    null.write_text(json.dumps({**VLLM, "median_itl_ms": None}))  # a tool that saw no ITL writes null
    with pytest.raises(peer_tools.ResultError, match="'median_itl_ms' is None, not a number"):
        peer_tools.read_result("vllm", null)


# one request: first chunk at 1.000 s with 3 tokens, then 3 tokens at +10 ms, then 2 tokens at +30 ms
CHUNKS = [(1.000, 3), (1.010, 3), (1.030, 2)]


def test_the_truths_itl_by_each_tools_definition():
    assert peer_tools.itl_samples(CHUNKS, "gap") == pytest.approx([10.0, 20.0])  # vLLM: per chunk gap
    assert peer_tools.itl_samples(CHUNKS, "itl_split") == pytest.approx([10 / 3] * 3 + [10.0] * 2)  # tokenswarm
    assert peer_tools.itl_samples(CHUNKS, "tpot") == pytest.approx([30.0 / 7])  # AIPerf, GuideLLM: per request
    # inference-perf: its tokenizer's tokens of each chunk share the chunk's time (here 2 per word)
    zeros = peer_tools.itl_samples(CHUNKS, "itl_zeros", lambda text: 2 * len(text.split()))
    assert zeros == pytest.approx([0.0] * 5 + [10.0] + [0.0] * 5 + [20.0] + [0.0] * 3)


def test_inference_perf_counts_tokens_in_the_text_the_truth_server_streams():
    assert peer_tools.chunk_texts([3, 1]) == [" w0 w1 w2", " w3"]
    assert peer_tools.chunk_texts([999, 2])[1] == " w999 w0"  # the server's words wrap at 1000
    seen = []
    peer_tools.itl_samples([(0.0, 2), (0.005, 1)], "itl_zeros", lambda t: seen.append(t) or 1)
    assert seen == [" w0 w1", " w2"]


def test_itl_samples_refuses_a_definition_it_does_not_know_and_itl_zeros_without_a_tokenizer():
    with pytest.raises(ValueError, match="unknown ITL definition 'median'"):
        peer_tools.itl_samples(CHUNKS, "median")
    with pytest.raises(ValueError, match="token counter"):
        peer_tools.itl_samples(CHUNKS, "itl_zeros")


def test_every_peer_has_a_reader_and_an_itl_definition():
    assert set(peer_tools.READERS) | {"tokenswarm"} == set(peer_tools.ITL_DEFS)


def test_the_command_lines_ask_for_the_same_load_closed_loop_chat_fixed_lengths_and_ignore_eos(tmp_path):
    tok = tmp_path / "tok"
    a = peer_tools.aiperf_command(Path("aiperf"), "http://127.0.0.1:9", tmp_path, 32, 15, 256, 128)
    assert a[a.index("--concurrency") + 1] == "32" and a[a.index("--endpoint-type") + 1] == "chat"
    assert a[a.index("--isl") + 1] == "256" and a[a.index("--osl") + 1] == "128"
    assert a[a.index("--extra-inputs") + 1] == "ignore_eos:true" and "--streaming" in a
    g = peer_tools.guidellm_command(Path("guidellm"), "http://127.0.0.1:9", tmp_path / "g.json", tok, 32, 15, 256, 128)
    assert "kind=concurrent,streams=32" in g and "kind=synthetic_text,prompt_tokens=256,output_tokens=128" in g
    assert any("request_format=/v1/chat/completions" in x for x in g) and f"kind=huggingface_auto,model={tok}" in g
    c = peer_tools.inference_perf_config("http://127.0.0.1:9", tmp_path, tok, 32, 500, 256, 128)
    assert c["api"] == {"type": "chat", "streaming": True} and c["server"]["ignore_eos"] is True
    assert c["load"]["stages"] == [{"num_requests": 500, "concurrency_level": 32}]
    assert (c["data"]["shared_prefix"]["question_len"], c["data"]["shared_prefix"]["output_len"]) == (256, 128)
    assert c["data"]["shared_prefix"]["system_prompt_len"] == 0


def test_aiperf_finds_the_local_tokenizer_as_a_hub_cache_entry_offline(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    cache = peer_tools.hub_cache(tok, tmp_path / "hub")
    repo = cache / "models--local--truth-tokenizer"
    revision = (repo / "refs" / "main").read_text()
    assert (repo / "snapshots" / revision / "tokenizer.json").read_text() == "{}"


def _peers_module():
    """benchmarks/peers.py, imported without leaving its sys.path entries behind."""
    import sys

    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("peers_bench", ROOT / "benchmarks" / "peers.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def test_a_runs_cost_counts_every_chunk_written_in_its_window_and_its_timings_only_completed_answers():
    peers = _peers_module()
    truth = {
        "a": {"received": 10.0, "outcome": "ok", "chunks": [[10.040, 3], [10.050, 3], [10.060, 2]]},
        "b": {"received": 11.0, "outcome": "ok", "chunks": [[11.050, 3], [11.060, 3], [11.070, 2]]},
        "cut": {"received": 12.0, "outcome": "aborted", "chunks": [[12.001, 3], [12.002, 3]]},  # cut at the deadline
        "other run": {"received": 30.0, "outcome": "ok", "chunks": [[30.1, 3]] * 5},
    }
    t = peers.truth_figures(truth, 9.0, 20.0, "gap")
    assert (t["requests"], t["ok"], t["chunks"]) == (3, 2, 8)
    assert t["ttft_p50"] == pytest.approx(45.0)  # 40 and 50 ms; the cut answer's 1 ms is not a TTFT sample
    assert t["itl_p50"] == pytest.approx(10.0)


def test_with_the_truth_servers_words_added_the_tokenizer_counts_one_token_per_word_as_the_server_does(tmp_path):
    from tokenswarm.testmodel.tokenizer import save_tokenizer, train_tokenizer

    save_tokenizer(train_tokenizer(512), tmp_path, model_max_length=1024)
    before = peer_tools.token_counter(tmp_path)
    assert before(" w0 w1 w2") > 3  # byte-level BPE alone cuts the words
    count = peer_tools.token_counter(peer_tools.truth_words(tmp_path))
    assert [count(t) for t in peer_tools.chunk_texts([3, 1, 996, 2])] == [3, 1, 996, 2]
    # so inference-perf's per-token times on a one-token-per-chunk stream are the chunk gaps
    assert peer_tools.itl_samples([(0.0, 1), (0.005, 1), (0.010, 1)], "itl_zeros", count) == pytest.approx([5.0, 5.0])


def test_a_peer_that_fails_is_reported_with_the_end_of_its_stderr_never_dropped(tmp_path):
    peers = _peers_module()
    crashed = peers.finish("guidellm", {"returncode": 2, "stdout": "", "stderr": "x" * 5000 + "\nValueError: boom"},
                           tmp_path / "absent.json")
    assert crashed["error"].startswith("exit 2: ") and crashed["error"].endswith("ValueError: boom")
    assert len(crashed["error"]) < 700  # the tail, not the whole log
    killed = peers.finish("aiperf", {"returncode": -9, "stdout": "", "stderr": "still running"}, tmp_path / "a.json")
    assert killed["error"].startswith("killed by signal 9")
    silent = peers.finish("vllm", {"returncode": 0, "stdout": "", "stderr": "wrote nothing"}, tmp_path / "absent.json")
    assert "no results file" in silent["error"] and "wrote nothing" in silent["error"]
    row = peers.row_for("guidellm #1", crashed, {})
    assert row == {"client": "guidellm #1", "failed": crashed["error"]}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(VLLM))
    ok = peers.finish("vllm", {"returncode": 0, "stdout": "", "stderr": ""}, path)
    assert ok["itl_def"] == "gap" and ok["reported"]["ttft_p50"] == pytest.approx(51.38194699975429)
