"""The run manifest: what ran, against what, when, on which workers, and what was lost."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tokenswarm.record import FORMAT_VERSION
from tokenswarm.redact import redact


def new_run_id(now: float | None = None) -> str:
    t = time.localtime(now or time.time())
    return time.strftime("%Y%m%d-%H%M%S", t) + f"-{os.getpid() % 10000:04d}"


def default_run_dir(run_id: str, root: str = "runs") -> Path:
    return Path(root) / run_id


class Manifest:
    """Mutable while the run goes; written atomically (tmp + rename) whenever it changes."""

    def __init__(self, run_dir: str | os.PathLike, run_id: str, *, scenario: dict[str, Any] | None,
                 scenario_name: str | None, command: list[str], load_mode: str | None) -> None:
        import locust

        from tokenswarm import __version__

        self.path = Path(run_dir) / "manifest.json"
        self.data: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "run_id": run_id,
            "tokenswarm_version": __version__,
            "locust_version": locust.__version__,
            "python_version": platform.python_version(),
            "host": socket.gethostname(),
            "command": command,
            "scenario_name": scenario_name,
            "scenario": scenario,
            "target": {},
            "load_mode": load_mode,
            "started_at": time.time(),
            "ended_at": None,
            "steps": [],
            "workers": [],
            "totals": {"requests_started": 0, "records_received": 0, "records_lost": 0},
            "generator_health": {},
            "warnings": [],
            "complete": False,
        }

    def warn(self, text: str) -> None:
        if text not in self.data["warnings"]:
            self.data["warnings"].append(text)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(redact(self.data), indent=2, default=str))
        os.replace(tmp, self.path)


def command_line() -> list[str]:
    return [os.path.basename(sys.argv[0])] + sys.argv[1:]
