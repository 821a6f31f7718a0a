"""An engine started for the tests yields the CPU to everything else on the machine.

vLLM CPU's busy threads kept other processes on the 2-core machine waiting for a core for up to
seconds (a Locust worker beside it missed its heartbeats and its master dropped it), so
``launch_server`` starts every engine at the lowest priority, for its threads and its session's
scheduling group alike. A stand-in server (a few lines of Python answering ``/health``) shows it
without an engine.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tokenswarm.testmodel.server import BACKGROUND_NICE, launch_server, niced, set_autogroup_nice
from tokenswarm.wire.ports import free_port

HEALTH_SERVER = """
import http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
threading.Thread(target=threading.Event().wait, daemon=True).start()  # its threads inherit it too
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def nice_of_every_thread(pid: int) -> set[int]:
    """The nice values of all threads of ``pid`` (field 19 of /proc/PID/task/TID/stat)."""
    values = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        values.add(int(stat[stat.rindex(")") + 2:].split()[16]))
    return values


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_started_engine_and_its_scheduling_group_run_at_the_lowest_priority(tmp_path):
    port = free_port()
    server = launch_server([sys.executable, "-c", HEALTH_SERVER, str(port)], port=port, speculative=False,
                           served_model_name="m", log_path=tmp_path / "s.log", env=dict(os.environ),
                           timeout_s=30, engine="stand-in")
    with server:
        assert server.process.poll() is None
        threads = len(os.listdir(f"/proc/{server.process.pid}/task"))
        assert threads >= 2 and nice_of_every_thread(server.process.pid) == {BACKGROUND_NICE}, server.log_text()
        group = Path(f"/proc/{server.process.pid}/autogroup")
        if group.exists():  # a kernel with autogroups: the session's group is niced as well
            assert group.read_text().split()[-1] == str(BACKGROUND_NICE), group.read_text()
    assert server.process.returncode is not None


def test_nice_none_leaves_the_command_as_it_is_and_a_value_prefixes_the_nice_program():
    assert niced(["srv", "--port", "1"], None) == ["srv", "--port", "1"]
    program = shutil.which("nice")
    expected = [program, "-n", "19", "srv", "--port", "1"] if program else ["srv", "--port", "1"]
    assert niced(["srv", "--port", "1"], 19) == expected


def test_a_process_without_an_autogroup_file_is_reported_not_niced():
    assert set_autogroup_nice(2**22 + 12345, 19) is False  # no such process: nothing to set
