"""Workers end with their master; a distributed run starts cleanly or says why not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.procs import free_port
from tests.helpers.runs import ROOT, describe_run, read_manifest, read_records, scenario_file, start_master_and_workers
from tests.helpers.waiting import wait_until
from tokenswarm.collect.relay import Collector
from tokenswarm.commands.workers import DEFAULT_WORKER_WAIT_S, distributed_argv, option_value, preflight
from tokenswarm.load.lifecycle import master_pid, parent_unchanged, watch_parent
from tokenswarm.sim.testing import start_sim

TRAFFIC = {"seed": 5, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 60},
                                         "max_tokens": {"dist": "uniform", "min": 8, "max": 32}}}}


# -- units -------------------------------------------------------------------------------------

def test_a_local_worker_acts_once_its_parent_process_has_ended():
    ppids = iter([100, 100, 100, 1])  # the parent at the call, then alive twice, then re-parented
    slept: list[float] = []
    gone: list[bool] = []
    watch_parent(lambda: gone.append(True), getppid=lambda: next(ppids), sleep=slept.append, poll_s=0.25)
    assert gone == [True]
    assert slept == [0.25, 0.25]


def test_a_local_worker_whose_master_ended_before_its_set_up_stops_at_once():
    slept: list[float] = []
    gone: list[bool] = []
    # the master (pid 100) ended before the watch began: the worker's parent is already PID 1
    watch_parent(lambda: gone.append(True), parent=100, getppid=lambda: 1, sleep=slept.append)
    assert gone == [True] and slept == [], "no poll: the master is known to be gone"
    assert not parent_unchanged(lambda: 1, parent=100)(), "and its last messages are not waited for"


def test_a_local_workers_master_is_the_process_that_forked_it_even_once_it_has_ended():
    assert master_pid(forked_from=100, getppid=lambda: 1) == 100, "noted at the fork, not read now"
    assert master_pid(forked_from=None, getppid=lambda: 100) == 100, "not forked since the import: the parent"


_FORK_SCRIPT = """
import os, sys, tokenswarm.load.lifecycle as lifecycle
before = lifecycle._forked_from
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, str(lifecycle.master_pid()).encode())
    os._exit(0)
os.close(write)
told = os.read(read, 64).decode()
os.waitpid(pid, 0)
print(told, os.getpid(), before, lifecycle._forked_from)
"""


def test_a_forked_child_knows_its_forker_and_the_forker_keeps_its_own_note():
    """The fork hooks in a real fork, in a fresh interpreter (a fork of the test process would copy
    its threads' locks): the child names the parent's PID, and the parent keeps its own value (a
    worker that forks a helper does not take itself for its own master)."""
    out = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, check=True).stdout.split()
    told, parent, before, after = out
    assert told == parent, "the child's master is the process that forked it"
    assert before == after == "None", "the parent's own note is untouched by its fork"


def test_local_workers_dial_the_port_the_master_binds():
    assert distributed_argv(["--master-bind-port", "5612"], 2)[:2] == ["--master-port", "5612"]
    assert distributed_argv(["--master-bind-port=5612"], 2)[:2] == ["--master-port", "5612"]
    assert "--master-port" not in distributed_argv(["--master-bind-port", "5612", "--master-port", "5700"], 2)
    assert "--master-port" not in distributed_argv([], 2), "the default port needs nothing"


def test_local_workers_get_a_free_port_of_their_own_even_when_5557_is_taken():
    import socket

    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            taken.bind(("127.0.0.1", 5557))
            taken.listen()
        except OSError:
            pass  # something else holds it already: the same situation
        extra = preflight([], 2)
    port = option_value(extra, "--master-bind-port")
    assert port is not None and port != "5557" and option_value(extra, "--master-port") == port, extra


def test_a_chosen_port_and_a_master_for_remote_workers_keep_their_port(monkeypatch):
    from tokenswarm.commands import workers

    monkeypatch.setattr(workers, "check_port_free", lambda host, port: None)  # whatever holds them now
    assert option_value(preflight(["--master-bind-port", "5612"], 2), "--master-bind-port") is None
    assert option_value(preflight(["--master", "--expect-workers", "2"], 0), "--master-bind-port") is None, \
        "remote workers dial the port they were told"


def test_a_master_waits_for_its_workers_for_a_bounded_time_unless_told_otherwise():
    assert distributed_argv([], 2) == ["--expect-workers-max-wait", str(DEFAULT_WORKER_WAIT_S)]
    assert distributed_argv(["--master", "--expect-workers", "3"], 0) == ["--expect-workers-max-wait", "60"]
    assert distributed_argv(["--master", "--expect-workers-max-wait", "5"], 0) == []
    assert distributed_argv(["-u", "4"], 0) == [], "a single-process run has no workers to wait for"


def test_a_final_message_is_matched_to_its_worker_before_any_heartbeat_report():
    class Writer:
        def write_lines(self, data: bytes, count: int) -> None:
            pass

    c = Collector(Writer())  # type: ignore[arg-type]
    c.on_batch({"worker_id": "w0", "first_seq": 0, "last_seq": 1, "count": 2, "data": b""}, client_id="node-a")
    c.on_final({"worker_id": "w0", "last_seq": 1, "requests_started": 2}, client_id="node-a")
    acc = c.workers["w0"]
    assert acc.client_id == "node-a" and acc.final_received


def test_a_busy_master_port_is_an_error_that_names_the_port_and_the_way_out():
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "tokenswarm", "run", "qa", "--headless", "--workers", "2",
                              "--master-bind-port", str(port)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert f"port {port}" in out.stderr and "--master-bind-port" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


# A worker that queues its last message for a master that is not listening yet, then exits the
# way Locust's workers do (sys.exit from the main greenlet, its RPC socket left open).
_WORKER_EXIT = """
import sys
from locust.rpc import Message, zmqrpc
from tokenswarm.load.lifecycle import ExitFlush

class Runner:
    client = zmqrpc.Client("127.0.0.1", int(sys.argv[1]), "worker-1")

ExitFlush(Runner(), linger_s=float(sys.argv[2]),
          master_alive=(lambda: False) if sys.argv[3] == "gone" else None).install()
Runner.client.send(Message("tokenswarm_final", {"records_sent": 10}, "worker-1"))
print("queued", flush=True)
sys.exit(0)
"""


def _exiting_worker(port: int, linger_s: float, master: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", _WORKER_EXIT, str(port), str(linger_s), master],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None and child.stdout.readline().strip() == "queued"
    return child


def test_a_worker_exit_waits_to_deliver_what_it_queued_for_its_master():
    import zmq
    from locust.rpc import Message

    port = free_port()
    child = _exiting_worker(port, linger_s=10.0, master="alive")
    time.sleep(0.5)  # the worker has called sys.exit; a plain exit would have dropped the message by now
    assert child.poll() is None, "the exit waits for the master"
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as master:
        master.bind(f"tcp://127.0.0.1:{port}")
        assert master.poll(10_000), "the queued message never arrived"
        identity, payload = master.recv_multipart()
    msg = Message.unserialize(payload)
    assert (identity, msg.type, msg.data) == (b"worker-1", "tokenswarm_final", {"records_sent": 10})
    assert child.wait(timeout=10) == 0, "delivered, the worker exits without waiting out the linger"


def test_a_worker_whose_master_is_gone_exits_at_once():
    started = time.monotonic()
    child = _exiting_worker(free_port(), linger_s=30.0, master="gone")
    assert child.wait(timeout=20) == 0
    assert time.monotonic() - started < 15, "nothing listens; the exit must not wait out the 30 s linger"


def test_the_exit_flush_runs_once_and_tolerates_a_worker_without_a_socket():
    from tokenswarm.load.lifecycle import ExitFlush

    class Socket:
        closed = False

        def __init__(self) -> None:
            self.context = self
            self.lingers: list[int] = []

        def destroy(self, linger: int) -> None:
            self.lingers.append(linger)

    class Runner:
        client = type("Client", (), {"socket": Socket()})()

    flush = ExitFlush(Runner(), linger_s=2.5)
    flush.flush()
    flush.flush()
    assert Runner.client.socket.lingers == [2500]
    ExitFlush(object()).flush()  # a runner that never connected: nothing to flush, no error


def test_a_local_worker_whose_parent_ended_before_its_exit_does_not_wait():
    from tokenswarm.load.lifecycle import ExitFlush, parent_unchanged

    ppids = iter([100, 100, 1])  # the parent at install, still there, then re-parented at exit
    alive = parent_unchanged(lambda: next(ppids))
    assert alive()
    lingers: list[int] = []
    socket = type("Socket", (), {"closed": False, "destroy": lambda self, linger: lingers.append(linger)})()
    socket.context = socket
    runner = type("Runner", (), {"client": type("Client", (), {"socket": socket})()})()
    ExitFlush(runner, linger_s=5.0, master_alive=alive).flush()
    assert lingers == [0]


# -- real processes ----------------------------------------------------------------------------

def _read_until_eof(stream, done: dict) -> None:
    done["text"] = stream.read()
    done["eof_at"] = time.monotonic()


@pytest.mark.slow
def test_local_workers_release_the_terminal_within_seconds_of_the_master(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load={"mode": "closed", "steps": [4], "warmup_s": 0,
                                                        "step_duration_s": 3, "stop_timeout_s": 30})
    run = tmp_path / "run"
    with start_sim("--profile", "tiny-fast") as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenswarm", "run", str(sc), "--host", sim.base_url, "--headless",
             "--workers", "2", "--out", str(run), "--master-bind-port", str(free_port()), "--only-summary"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True)
        done: dict = {}
        reader = threading.Thread(target=_read_until_eof, args=(proc.stdout, done))
        reader.start()
        try:
            proc.wait(timeout=120)
            exited_at = time.monotonic()
            reader.join(timeout=60)
        finally:
            if proc.poll() is None or reader.is_alive():
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, done.get("text", "")[-3000:]
    lingered_s = done["eof_at"] - exited_at
    assert lingered_s < 10, f"workers held the pipe {lingered_s:.1f} s after the master ended (stop_timeout is 30 s)"
    records = read_records(run)
    m = read_manifest(run)
    assert m["totals"]["records_lost"] == 0 and m["totals"]["records_received"] == len(records) > 0
    assert all(w["final_received"] for w in m["workers"]) and len(m["workers"]) == 2


@pytest.mark.slow
def test_plain_workers_exit_within_seconds_of_their_masters_end(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load={"mode": "closed", "steps": [2], "warmup_s": 0,
                                                        "step_duration_s": 2, "stop_timeout_s": 30})
    with start_sim("--profile", "tiny-fast") as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2)
        try:
            out, _ = master.communicate(timeout=120)
            ended = time.monotonic()
            for w in workers:
                w.wait(timeout=15)
            lingered_s = time.monotonic() - ended
        finally:
            for p in (master, *workers):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
    assert master.returncode == 0, describe_run(out, workers)
    assert lingered_s < 10, f"workers lived {lingered_s:.1f} s past the master"
    assert read_manifest(tmp_path / "run")["totals"]["records_lost"] == 0


@pytest.mark.slow
def test_a_local_worker_stops_when_its_master_is_killed(tmp_path: Path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load={"mode": "closed", "steps": [2], "warmup_s": 0,
                                                        "step_duration_s": 60, "stop_timeout_s": 30})
    port = str(free_port())
    with start_sim("--profile", "tiny-fast") as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless",
             "--scenario", str(sc), "--host", sim.base_url, "--out", str(tmp_path / "run"), "--processes", "1",
             "--master-bind-port", port, "--master-port", port, "--only-summary"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
        try:
            wait_until((tmp_path / "run" / "records.jsonl").exists, 60, "the first records of the run")
            children = psutil.Process(proc.pid).children()
            assert children, "Locust forked no worker"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            gone, alive = psutil.wait_procs(children, timeout=10)
        finally:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            for c in psutil.Process().children(recursive=True):
                if c.pid != os.getpid() and "--processes" in " ".join(c.cmdline()):
                    c.kill()
    assert not alive, "the worker outlived its killed master by more than 10 s"
