"""Locust's stop names its caller without reading source (tokenswarm.load.setup.frame_only_stop_log).

``Runner.stop`` logs ``called from FILE:LINE`` through ``inspect.stack()``; with source context
the first call resolves the path of every loaded module (~50 ms in a run, while streams in
flight are being read). Run in a fresh interpreter, where no one has built inspect's module map
yet, so the test sees whether the stop builds it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import inspect, logging, sys
    from locust import User, constant
    from locust.env import Environment
    from tokenswarm.load.setup import frame_only_stop_log

    class Idle(User):
        wait_time = constant(1)

    lines = []
    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logging.getLogger("locust.runners").addHandler(Keep())
    logging.getLogger("locust.runners").setLevel(logging.DEBUG)
    if sys.argv[1] == "frame-only":
        frame_only_stop_log()
    runner = Environment(user_classes=[Idle]).create_local_runner()

    def stopper():
        runner.stop()
    stopper()
    said = [t for t in lines if "called from" in t]
    print(len(inspect.modulesbyfile), said[0])
""")


def stop_in_a_fresh_interpreter(mode: str, tmp_path) -> tuple[int, str]:
    """(modules inspect mapped, the stop's debug line naming its caller)"""
    program = tmp_path / "stop_program.py"
    program.write_text(PROGRAM)
    out = subprocess.run([sys.executable, str(program), mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    modules_mapped, said = out.stdout.strip().split(" ", 1)
    return int(modules_mapped), said


def test_the_stop_names_the_same_caller_without_mapping_every_loaded_module(tmp_path):
    mapped, said = stop_in_a_fresh_interpreter("frame-only", tmp_path)
    mapped_as_shipped, said_as_shipped = stop_in_a_fresh_interpreter("as-shipped", tmp_path)
    assert said == said_as_shipped and "runners.py:" in said, (said, said_as_shipped)
    assert mapped == 0 and mapped_as_shipped > 100  # what Locust as it comes resolved to say it
