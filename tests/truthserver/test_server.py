"""The truth server on uvicorn: a stream any client can read, max_tokens honoured, a truth log that joins."""

import ast
import http.client
import json
import socket
import time

import pytest

from benchmarks.truthjoin import join, load_truth
from benchmarks.truthserver.testing import start_truth
from tests.helpers.runs import ROOT, read_records, run_locust
from tests.helpers.waiting import wait_until

ARGS = ("--step-ms", "2", "--ttft-ms", "10", "--tokens-per-chunk", "1-5")


def stream_body(**kw):
    return {"model": "m", "messages": [{"role": "user", "content": "say something"}], "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}, **kw}


def read_sse(port, path, body):
    """POST with the standard library and split the response into SSE data payloads."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    return resp, [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]


def test_a_plain_client_reads_a_chunked_sse_stream_of_exactly_max_tokens(tmp_path):
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, *ARGS) as srv:
        resp, data = read_sse(srv.port, "/v1/chat/completions", stream_body(max_tokens=23, ignore_eos=True))
    assert resp.status == 200 and resp.getheader("server") == "uvicorn"
    assert resp.getheader("transfer-encoding") == "chunked" and resp.getheader("content-type").startswith("text/event-stream")
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 23
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    cums = [e["usage"]["completion_tokens"] for e in content]
    assert cums[-1] == 23 and content[-1]["choices"][0]["finish_reason"] == "length"
    rid = events[0]["id"]
    t = load_truth(truth)[rid]
    assert t["outcome"] == "ok" and t["output_tokens"] == 23 and t["endpoint"] == "chat"
    assert [n for _, n in t["chunks"]] == [b - a for a, b in zip([0, *cums], cums)]
    written = [w for w, _ in t["chunks"]]
    assert written == sorted(written) and written[0] - t["received"] >= 0.010


def test_completions_without_ignore_eos_stop_at_max_tokens_or_earlier_and_say_why(tmp_path):
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, *ARGS, "--natural-tokens", "5-8") as srv:
        _, short = read_sse(srv.port, "/v1/completions", {"prompt": "a b", "max_tokens": 3, "stream": True})
        _, natural = read_sse(srv.port, "/v1/completions", {"prompt": "a b", "max_tokens": 50, "stream": True})
        status, whole = srv.request("POST", "/v1/completions", {"prompt": "a b", "max_tokens": 4})
    last = [json.loads(d) for d in short[:-1]][-1]["choices"][0]
    assert last["finish_reason"] == "length" and "usage" not in json.loads(short[0])
    ended = [json.loads(d) for d in natural[:-1]][-1]["choices"][0]["finish_reason"]
    text = "".join(json.loads(d)["choices"][0]["text"] for d in natural[:-1])
    assert ended == "stop" and 5 <= len(text.split()) <= 8
    body = json.loads(whole)
    assert status == 200 and body["usage"]["completion_tokens"] == 4 and len(body["choices"][0]["text"].split()) == 4


def test_a_bad_request_gets_a_400_naming_the_field_and_a_truth_line(tmp_path):
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, *ARGS) as srv:
        status, body = srv.request("POST", "/v1/chat/completions", {"messages": []})
        bad_json = srv.request("POST", "/v1/completions", None)  # empty body
    assert status == 400 and json.loads(body)["error"]["param"] == "messages"
    assert bad_json[0] == 400 and "not valid JSON" in json.loads(bad_json[1])["error"]["message"]
    assert sorted(t["status"] for t in load_truth(truth).values()) == [200, 400, 400]  # 200: the warm-up


def test_a_client_that_hangs_up_mid_stream_is_logged_as_aborted_with_the_chunks_it_was_sent(tmp_path):
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, "--step-ms", "20", "--ttft-ms", "1", "--tokens-per-chunk", "1") as srv:
        s = socket.create_connection(("127.0.0.1", srv.port))
        body = json.dumps(stream_body(max_tokens=500, ignore_eos=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\n\r\n%b" % (len(body), body))
        got = b""
        while got.count(b"completion_tokens") < 4:  # role event + 3 content events
            got += s.recv(65536)
        s.close()

        def aborted():
            srv.flush()
            return any(t["outcome"] == "aborted" for t in load_truth(truth).values())

        wait_until(aborted, 10, "the aborted stream in the truth log")
    t = next(t for t in load_truth(truth).values() if t["outcome"] == "aborted")
    assert 3 <= t["output_tokens"] < 500 and t["output_tokens"] == len(t["chunks"]) and t["finish_reason"] is None


@pytest.mark.slow
def test_its_truth_log_joins_every_tokenswarm_record_with_exact_tokens_and_chunks(tmp_path):
    truth = tmp_path / "truth.jsonl"
    scenario = tmp_path / "truth.yaml"
    scenario.write_text(json.dumps({
        "name": "truthjoin", "target": {"metrics_url": None},
        "traffic": {"seed": 3, "classes": {"code": {
            "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 16},
            "max_tokens": {"dist": "uniform", "min": 20, "max": 60}, "sampling": {"ignore_eos": True}}}},
        "load": {"mode": "closed", "steps": [4], "warmup_s": 0, "step_duration_s": 3, "spawn_rate": 100,
                 "stop_timeout_s": 10}}))
    with start_truth(truth, *ARGS) as srv:
        res = run_locust(scenario, srv.base_url, tmp_path / "run", timeout_s=120)
    assert res.returncode == 0, res.stderr[-2000:]  # no SLO in this scenario: 0 unless the run broke
    records = [r for r in read_records(tmp_path / "run") if r["outcome"] == "ok"]
    t = load_truth(truth)
    assert len(records) >= 8
    for r in records:
        assert r["response_id"] in t, r["response_id"]
        assert r["chunk_tokens"] == [n for _, n in t[r["response_id"]]["chunks"]]
        assert r["output_tokens"] == t[r["response_id"]]["output_tokens"]
    errors = join(((r["response_id"], r["ttft_ms"], r["chunk_offsets_ms"]) for r in records), t)
    assert errors["joined"] == len(records) and errors["gaps"] > 0


def test_the_truth_server_shares_no_code_with_the_simulator():
    imported = set()
    for path in (ROOT / "benchmarks" / "truthserver").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
    assert {"uvicorn", "starlette.applications"} <= imported | {m.split(".")[0] for m in imported}
    assert not [m for m in imported if m.startswith("tokenswarm")]


@pytest.mark.timing
@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="TCP_INFO is Linux-only")
def test_the_kernel_says_how_long_a_request_waited_before_the_server_read_it():
    from benchmarks.truthserver.app import read_delay_ms

    srv = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    try:
        client.sendall(b"x")
        time.sleep(0.05)  # the data waits unread in the kernel for at least 50 ms
        delay = read_delay_ms(conn)
        assert delay is not None and delay >= 40, f"{delay} ms: expected >= 50 ms minus one 4 ms jiffy and rounding"
    finally:
        for s in (client, conn, srv):
            s.close()
    assert read_delay_ms(None) is None


@pytest.mark.timing
def test_a_request_the_loop_reads_late_is_dated_by_its_arrival_in_the_kernel():
    import asyncio

    from benchmarks.truthserver.app import monotonic, stamp_reads

    async def scenario() -> tuple[float, float | None, float]:
        loop = asyncio.get_running_loop()
        got: asyncio.Future = loop.create_future()
        installed = []

        class Probe(asyncio.Protocol):
            kernel_arrival_s: float | None = None

            def connection_made(self, transport) -> None:  # type: ignore[override]
                installed.append(stamp_reads(transport, self))

            def data_received(self, data: bytes) -> None:
                got.set_result((self.kernel_arrival_s, monotonic()))

        server = await loop.create_server(Probe, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname()[:2])
        # The loop accepts, runs connection_made and starts the transport's reading over several
        # callbacks: an event set in connection_made resumes this coroutine before the last of them
        # (measured: the read then goes unstamped 1 time in 3), so the loop is given the time.
        await asyncio.sleep(0.05)
        sent = monotonic()
        client.sendall(b"x")
        time.sleep(0.05)  # the loop is blocked: the byte waits unread in the kernel for 50 ms
        arrived, read = await asyncio.wait_for(got, 5)
        client.close()
        server.close()
        assert installed == [True]
        return sent, arrived, read

    sent, arrived, read = asyncio.run(scenario())
    assert arrived is not None and 0 <= arrived - sent < 0.005  # it arrived at once ...
    assert read - arrived >= 0.045  # ... and was read 50 ms later: the stamp keeps the arrival


def test_every_truth_line_says_when_its_request_arrived_and_how_long_it_waited_unread(tmp_path):
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, *ARGS) as srv:
        read_sse(srv.port, "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    lines = list(load_truth(truth).values())
    assert len(lines) == 2  # the warm-up and ours
    assert [t["received_source"] for t in lines] == ["kernel", "kernel"]
    assert all(isinstance(t["read_delay_ms"], float) and 0 <= t["read_delay_ms"] < 1000 for t in lines)


def test_on_uvloop_received_is_the_loops_read_and_the_delay_comes_from_tcp_info(tmp_path):
    pytest.importorskip("uvloop")
    truth = tmp_path / "truth.jsonl"
    with start_truth(truth, *ARGS, "--loop", "uvloop") as srv:
        read_sse(srv.port, "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    lines = list(load_truth(truth).values())
    assert [t["received_source"] for t in lines] == ["loop", "loop"]
    if hasattr(socket, "TCP_INFO"):
        assert all(isinstance(t["read_delay_ms"], int) and t["read_delay_ms"] >= 0 for t in lines)
