"""The distributed-run helpers keep what every process said, so a failed run names its cause."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.runs import describe_run


def test_a_failed_runs_description_ends_with_the_master_and_each_workers_last_words(tmp_path):
    workers = []
    for i in range(2):
        log_path = tmp_path / f"run.worker-{i}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", f"print('x' * 5000); print('worker {i} failed to send heartbeat')"],
                                    stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log_path
        proc.wait(timeout=30)
        workers.append(proc)
    text = describe_run("master starts\n" + "m" * 4000 + "\nmaster: worker dropped", workers, tail_chars=1000)
    assert "master: worker dropped" in text and "master starts" not in text, "the master's end, not all of it"
    assert "worker 0 failed to send heartbeat" in text and "worker 1 failed to send heartbeat" in text
    assert text.count("x") < 1100, "each worker's log is cut to its end"
    assert f"pid {workers[1].pid}, exit 0" in text


def test_a_worker_without_a_log_is_named_as_such():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert "(no log)" in describe_run(None, [proc])
