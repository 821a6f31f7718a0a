"""Start a real Locust web UI running tokenswarm (local, --processes, or master + workers)."""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import math
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.procs import free_port, port_open
from tests.helpers.runs import ROOT, scenario_file
from tests.helpers.waiting import wait_until

TWO_TASKS = {
    "qa": {"weight": 2, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
           "max_tokens": {"dist": "uniform", "min": 16, "max": 48}},
    "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 100, "max": 300},
             "max_tokens": {"dist": "uniform", "min": 16, "max": 48}},
}


def short_scenario(tmp_path: Path, steps: list[int] = (1,), step_duration_s: float = 3) -> Path:
    return scenario_file(tmp_path, traffic={"seed": 5, "classes": TWO_TASKS},
                         load={"mode": "closed", "steps": list(steps), "warmup_s": 0.5,
                               "step_duration_s": step_duration_s, "stop_timeout_s": 10},
                         target={"scrape_interval_s": 1})


@contextlib.contextmanager
def locust_web_ui(scenario: Path, host: str, out: Path, *extra: str, mode: str = "local",
                  log_dir: Path | None = None) -> Iterator[str]:
    """Yields the web UI's base URL (``http://127.0.0.1:PORT/``); stops every process afterwards."""
    port = free_port()
    locustfile = str(ROOT / "locustfiles" / "llm.py")
    log_dir = log_dir or out.parent
    cmd = [sys.executable, "-m", "locust", "-f", locustfile, "--scenario", str(scenario), "--host", host,
           "--web-host", "127.0.0.1", "--web-port", str(port), "--out", str(out), *extra]
    procs = []
    master_port = None
    if mode == "processes":  # a port of its own: Locust's 5557 may be another test's (parallel workers)
        local_port = str(free_port())
        cmd += ["--processes", "2", "--master-bind-port", local_port, "--master-port", local_port]
    elif mode == "master":
        master_port = free_port()
        cmd += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
                "--expect-workers", "2"]
    logs = [open(log_dir / "locust-master.log", "w")]
    procs.append(subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=logs[0], stderr=subprocess.STDOUT))
    if mode == "master":
        for i in range(2):
            logs.append(open(log_dir / f"locust-worker{i}.log", "w"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", locustfile, "--worker", "--master-host", "127.0.0.1",
                 "--master-port", str(master_port)],
                cwd=ROOT, start_new_session=True, stdout=logs[-1], stderr=subprocess.STDOUT))
    try:
        _wait_listening(port, procs[0], log_dir / "locust-master.log")
        yield f"http://127.0.0.1:{port}/"
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        for fh in logs:
            fh.close()


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    """Until the web UI listens (a starved machine, CI beside a vLLM server, can take long to
    import Locust); a process that exits first, or a timeout, fails with what it printed."""
    try:
        wait_until(lambda: proc.poll() is not None or port_open(port), timeout_s, f"the web UI on 127.0.0.1:{port}")
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- {log.name} ---\n" + log.read_text(errors="replace")[-3000:]) from None
    if proc.poll() is not None:
        raise AssertionError(f"locust exited with status {proc.returncode} before its web UI listened:\n"
                             + log.read_text(errors="replace")[-3000:])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def post_form(url: str, fields: dict[str, Any]) -> Any:
    """POST a form as a script may: with the session's token from ``tokenswarm/csrf.json`` (see webui/guard.py)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(urllib.parse.urljoin(url, "tokenswarm/csrf.json"), timeout=10) as resp:
        token = json.loads(resp.read())["token"]
    data = urllib.parse.urlencode(fields, doseq=True).encode()
    req = urllib.request.Request(url, data=data, headers={"X-Tokenswarm-Csrf": token})
    with opener.open(req, timeout=10) as resp:
        return json.loads(resp.read())


def wait_for(pred, timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    """:func:`tests.helpers.waiting.wait_until`, polling a page or the UI's JSON every half second."""
    return wait_until(pred, timeout_s, what, every_s=every_s)


def wait_workers(base: str, n: int, timeout_s: float = 40) -> None:
    wait_for(lambda: get_json(base + "stats/requests").get("worker_count", 0) >= n, timeout_s, f"{n} workers")


def nearest_rank(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def within_live_precision(live_ms: float, exact_ms: float) -> bool:
    """Live histograms: 1 % buckets (bucket middle is within 0.5 %), then rounded to 0.1 ms."""
    return abs(live_ms - exact_ms) <= 0.01 * exact_ms + 0.05 + 1e-9
