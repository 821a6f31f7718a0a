"""Prompt sizing speaks each engine's /tokenize dialect, and a counter must prove itself on the probe."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokenswarm.workload.tokencount import PROBE_TEXT, EstimateCounter, ServerTokenizeCounter, make_token_counter

# Fake engines, one token per word. "llamacpp" reads "content" and answers a vLLM-style
# {"prompt"} body with {"tokens": []} -- what llama.cpp's server does. Exits after 60 s.
FAKE = r"""
import json, sys, threading, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = sys.argv[1]
seen = []
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer k":
            return self.reply(401, {"error": "no key"})
        if mode == "llamacpp":
            words = data.get("content", "").split()
            return self.reply(200, {"tokens": list(range(len(words)))})
        if mode == "tgi":
            if "inputs" not in data:
                return self.reply(422, {"error": "missing field inputs"})
            return self.reply(200, [{"id": i, "text": w, "start": 0, "stop": 1} for i, w in enumerate(data["inputs"].split())])
        if mode == "constant":
            return self.reply(200, {"count": 1})
        return self.reply(404, {"detail": "Not Found"})
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
threading.Timer(60, lambda: os._exit(0)).start()
srv.serve_forever()
"""


@pytest.fixture
def engine(tmp_path):
    procs = []

    def start(mode: str) -> str:
        script = tmp_path / "fake_engine.py"
        script.write_text(FAKE)
        proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        procs.append(proc)
        return f"http://127.0.0.1:{int(proc.stdout.readline())}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


AUTH = {"Authorization": "Bearer k"}


def test_llama_cpp_server_is_asked_with_content_after_an_empty_answer_to_the_vllm_body(engine):
    counter = make_token_counter(engine("llamacpp"), "m", None, headers=AUTH)
    assert isinstance(counter, ServerTokenizeCounter) and counter.dialect.name == "llama.cpp"
    assert any("implausible" in f for f in counter.probe_failures), counter.probe_failures
    assert counter.count("one two three four") == 4


def test_tgi_tokenize_answers_a_list_of_tokens(engine):
    counter = make_token_counter(engine("tgi"), "m", None, headers=AUTH)
    assert isinstance(counter, ServerTokenizeCounter) and counter.dialect.name == "tgi"
    assert counter.count("a b c") == 3


def test_headers_reach_every_probe_request(engine):
    counter = ServerTokenizeCounter(engine("tgi"), "m")  # no key: every dialect is refused
    assert counter.probe() is False
    assert all("HTTP 401" in f for f in counter.probe_failures) and len(counter.probe_failures) == 3


def test_a_counter_that_ignores_its_text_is_not_trusted_and_the_estimate_is_used_with_a_warning(engine, caplog):
    base = engine("constant")
    with caplog.at_level("WARNING", logger="tokenswarm.workload.tokencount"):
        counter = make_token_counter(base, "m", None, headers=AUTH)
    assert isinstance(counter, EstimateCounter)
    assert "sized with estimate" in caplog.text and "server-counted" in caplog.text


def test_the_probe_text_is_long_enough_to_judge_a_count():
    assert len(PROBE_TEXT.split()) >= 10 and PROBE_TEXT.isascii()
