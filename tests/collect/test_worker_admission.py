"""The master admits only workers that present the worker token (tokenswarm.orchestrate.admission).

A real master with ``TOKENSWARM_WORKER_TOKEN`` set, one real worker with the token, and two
fake workers on 127.0.0.1 that speak Locust's ZeroMQ protocol themselves (one presents no
token, one a wrong one) and keep sending record batches: they get no spawn message (so none
of the scenario's secrets), nothing of theirs reaches ``records.jsonl``, and the manifest
names them with what was dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.procs import HERE, free_port, wait_port
from tests.helpers.runs import ROOT, read_manifest, read_records, scenario_file
from tests.helpers.waiting import wait_until
from tokenswarm.orchestrate.exposure import is_loopback, master_refusal, web_ui_warning
from tokenswarm.sim.testing import start_sim

TOKEN = "worker-token-for-this-test-6f1e2d"
SECRET = "gw-header-secret-in-the-spawn-7734"
KEY = "sk-admission-planted-key-5566778899"
QA = {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 20},
      "max_tokens": {"dist": "fixed", "value": 8}}


def received(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x] if path.exists() else []


@pytest.mark.slow
def test_a_rogue_worker_without_the_token_gets_no_spawn_and_its_records_are_refused(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": {"qa": QA}},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 3,
                             "stop_timeout_s": 2},
                       target={"api_key_env": "ADMISSION_KEY", "headers": {"X-Gateway-Token": SECRET},
                               "metrics_url": None})
    port = free_port()
    env = {**os.environ, "TOKENSWARM_WORKER_TOKEN": TOKEN, "ADMISSION_KEY": KEY}
    locustfile = str(ROOT / "locustfiles" / "llm.py")
    procs: list[subprocess.Popen] = []
    outs = {mode: tmp_path / f"rogue-{mode}.jsonl" for mode in ("silent", "wrong-token")}
    try:
        with start_sim("--profile", "tiny-fast") as sim:
            master = subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", locustfile, "--master", "--headless", "--expect-workers", "1",
                 "--master-bind-port", str(port), "--scenario", str(sc), "--host", sim.base_url,
                 "--out", str(tmp_path / "run"), "--only-summary"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True,
                env=env)
            procs.append(master)
            wait_port(port, 60)
            for mode, out in outs.items():
                procs.append(subprocess.Popen([sys.executable, str(HERE / "rogue_worker.py"), str(port), mode,
                                               str(out), "60"], cwd=ROOT, start_new_session=True))
            wait_until(lambda: all(any(m["type"] == "ack" for m in received(o)) for o in outs.values()), 30,
                       "the fake workers' acknowledgements from the master")
            # the real worker comes last: the fake ones are connected when the run is spawned
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", locustfile, "--worker", "--master-host", "127.0.0.1",
                 "--master-port", str(port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True, env=env))
            out, _ = master.communicate(timeout=120)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    assert master.returncode == 0, out[-3000:]
    run = tmp_path / "run"
    records = read_records(run)
    assert records, "the admitted worker's records were written"
    assert "ROGUE-RECORD-LINE" not in (run / "records.jsonl").read_text()
    assert {r["worker_id"] for r in records} and not any(r["worker_id"].startswith("rogue") for r in records)
    refused = {r["worker"]: r for r in read_manifest(run)["workers_refused"]}
    assert sorted(w.split("-")[1] for w in refused) == ["silent", "wrong"], refused
    for name, r in refused.items():
        assert r["record_batches_dropped"] >= 1 and r["messages_dropped"] >= r["record_batches_dropped"], r
        assert r["reason"] == ("wrong worker token" if "wrong" in name else "never presented the worker token")
    assert len(read_manifest(run)["workers"]) == 1
    for mode, path in outs.items():
        got = received(path)
        types = {m["type"] for m in got}
        assert "spawn" not in types and "tokenswarm_step" not in types, (mode, types)
        text = path.read_text()
        assert SECRET not in text and KEY not in text and TOKEN not in text
    assert "quit" in {m["type"] for m in received(outs["wrong-token"])}, "a wrong token is told to go"


def test_only_loopback_binds_count_as_this_machine():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("*", "", "0.0.0.0", "::", "10.0.0.5", "master", None))


def test_a_master_port_beyond_this_machine_needs_a_worker_token():
    for host in ("*", "0.0.0.0", "10.1.2.3"):
        why = master_refusal(host, None)
        assert why and "TOKENSWARM_WORKER_TOKEN" in why
        assert master_refusal(host, "a-token") is None
    assert master_refusal("127.0.0.1", None) is None


def test_a_web_ui_beyond_this_machine_without_login_is_warned_about():
    assert "--web-login" in (web_ui_warning("0.0.0.0", False, 8089) or "")
    assert "all interfaces" in (web_ui_warning("*", False, 8089) or "")
    assert web_ui_warning("0.0.0.0", True, 8089) is None
    assert web_ui_warning("127.0.0.1", False, 8089) is None


def parsed_binds(*argv: str) -> tuple[str, str]:
    """(web_host, master_bind_host) as Locust parses ``locust -f locustfiles/llm.py ARGV``."""
    code = ("import sys; from locust import argument_parser as ap; import tokenswarm.locustfile;"
            "o = ap.parse_options(sys.argv[1:]); print(o.web_host, o.master_bind_host)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    out = subprocess.run([sys.executable, "-c", code, "-f", "locustfiles/llm.py", *argv], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    web, master = out.stdout.split()[-2:]
    return web, master


def test_locust_f_and_tokenswarm_run_bind_127_0_0_1_unless_told_otherwise():
    import argparse

    from tokenswarm.commands.run import add_arguments, build_locust_argv

    assert parsed_binds("--master") == ("127.0.0.1", "127.0.0.1")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns, ns.passthrough = parser.parse_known_args(["qa", "--workers", "2"])
    assert parsed_binds(*build_locust_argv(ns, "qa")[2:]) == ("127.0.0.1", "127.0.0.1")
    assert parsed_binds("--web-host", "0.0.0.0", "--master-bind-host", "*") == ("0.0.0.0", "*"), "told otherwise"


class FakeServer:
    def __init__(self):
        self.sent: list[tuple[str, str, object]] = []

    def send_to_client(self, msg):
        self.sent.append((msg.node_id, msg.type, msg.data))


class FakeRunner:
    """What the gate uses of Locust's MasterRunner: handle_message and server.send_to_client."""

    def __init__(self):
        self.server = FakeServer()
        self.handled: list[tuple[str, str]] = []

    def handle_message(self, client_id, msg):
        self.handled.append((client_id, msg.type))


def msg(kind: str, data, node: str):
    from locust.rpc import Message

    return Message(kind, data, node)


def test_the_gate_holds_a_connection_until_its_token_and_drops_all_else_in_memory():
    from tokenswarm.orchestrate.admission import MSG_HELLO, WorkerGate

    runner = FakeRunner()
    gate = WorkerGate(runner, "tok-123").install()
    runner.handle_message("w1", msg("client_ready", "2.0", "w1"))
    runner.handle_message("w1", msg("tokenswarm_records", {"data": b"x"}, "w1"))
    assert runner.handled == [] and runner.server.sent == [("w1", "ack", {})], "acked, held, records dropped"
    runner.handle_message("w1", msg(MSG_HELLO, {"token": "tok-123"}, "w1"))
    assert runner.handled == [("w1", "client_ready")], "admitted: Locust sees its client_ready now"
    runner.handle_message("w1", msg("tokenswarm_records", {"data": b"x"}, "w1"))
    runner.handle_message("w1", msg("tokenswarm_records", {"data": b"x"}, "w2"))  # forged sender on w1's connection
    assert runner.handled[-1] == ("w1", "tokenswarm_records") and len(runner.handled) == 2
    runner.handle_message("r1", msg("client_ready", "2.0", "r1"))
    runner.handle_message("r1", msg(MSG_HELLO, {"token": "tok-124"}, "r1"))
    assert [t for n, t, _ in runner.server.sent if n == "r1"] == ["ack", "tokenswarm_refused", "quit"]
    refused = {r["worker"]: r for r in gate.refusals()}
    assert refused["r1"]["reason"] == "wrong worker token"
    assert refused["w1"]["reason"] == "messages with another worker's id" and refused["w1"]["record_batches_dropped"] == 1


def test_a_flood_of_fake_connections_is_tracked_within_a_bound():
    from tokenswarm.orchestrate.admission import MAX_TRACKED, OTHERS, WorkerGate

    runner = FakeRunner()
    gate = WorkerGate(runner, "tok").install()
    for i in range(MAX_TRACKED * 2):
        runner.handle_message(f"c{i}", msg("client_ready", "2.0", f"c{i}"))
        runner.handle_message(f"c{i}", msg("heartbeat", {}, f"c{i}"))
    assert len(gate.pending) == MAX_TRACKED and len(gate.dropped) <= MAX_TRACKED + 1
    assert gate.dropped[OTHERS]["messages"] > 0 and runner.handled == []


def test_without_a_token_every_connection_is_admitted_as_in_locust():
    from tokenswarm.orchestrate.admission import MSG_HELLO, WorkerGate

    runner = FakeRunner()
    gate = WorkerGate(runner, None).install()
    runner.handle_message("w1", msg("client_ready", "2.0", "w1"))
    runner.handle_message("w1", msg(MSG_HELLO, {"token": ""}, "w1"))
    runner.handle_message("w1", msg("stats", {}, "w1"))
    assert runner.handled == [("w1", "client_ready"), ("w1", "stats")] and gate.refusals() == []


def test_a_message_the_master_cannot_handle_is_dropped_and_counted_and_the_master_keeps_listening(caplog):
    from tokenswarm.collect.relay import Collector
    from tokenswarm.orchestrate.admission import WorkerGate

    class Writer:
        lines = 0

        def write_lines(self, data: bytes, count: int) -> None:
            Writer.lines += count

    collector = Collector(Writer())
    runner = FakeRunner()
    handled = runner.handle_message

    def handle(client_id, message):  # Locust's handler, as it dispatches tokenswarm's records to the collector
        handled(client_id, message)
        if message.type == "tokenswarm_records":
            collector.on_batch(message.data, client_id=client_id)

    runner.handle_message = handle
    gate = WorkerGate(runner, None).install()
    runner.handle_message("w1", msg("client_ready", "2.0", "w1"))
    good = {"worker_id": "w1", "first_seq": 0, "last_seq": 1, "count": 2, "data": b"a\nb\n"}
    runner.handle_message("w1", msg("tokenswarm_records", {"worker_id": "w1", "data": b"x\n"}, "w1"))  # no seqs
    runner.handle_message("w1", msg("tokenswarm_records", good, "w1"))
    assert Writer.lines == 2, "the next batch is still read"
    assert gate.refusals() == [{"worker": "w1", "reason": "messages the master could not handle",
                                "messages_dropped": 1, "record_batches_dropped": 1}]
    assert "dropped tokenswarm_records from worker w1" in caplog.text and "KeyError" in caplog.text
