"""The study manifest ``DIR/study.json``: what the study is, how far it got, what failed.

It is rewritten atomically after every change of an arm-round's state, so an interrupted
study leaves an accurate manifest and a resumed one skips the arm-rounds marked ``done``
whose run directory is complete.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from tokenswarm import __version__
from tokenswarm.manifest import RunManifest
from tokenswarm.redact import redact
from tokenswarm.study.spec import Study

STUDY_FORMAT_VERSION = 1
MANIFEST_NAME = "study.json"


def machine_info() -> dict[str, Any]:
    """Where the load generator ran (the servers' hardware comes from their /v1/models and logs)."""
    return {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "python_version": platform.python_version(), "hostname": platform.node()}


def run_dir_name(arm: str, round_no: int) -> str:
    """``runs/<arm>-r<round>``, relative to the study directory."""
    return f"runs/{arm}-r{round_no}"


def run_complete(run_dir: Path) -> bool:
    """A run directory whose manifest says it finished (a missing or unreadable one did not)."""
    try:
        return RunManifest.from_json(json.loads((run_dir / "manifest.json").read_text())).complete
    except (OSError, ValueError):  # ManifestError is a ValueError
        return False


class StudyManifest:
    """Load, update and save ``study.json``."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def open(cls, out: Path, study: Study, order: list[tuple[int, str]]) -> "StudyManifest":
        """A fresh manifest, or the existing one of the same study (resume).

        Raises ``ValueError`` when ``out`` holds a different study (other arms or scenario).
        """
        path = out / MANIFEST_NAME
        identity = {"scenario_path": study.scenario, "arms": [a.describe() for a in study.arms],
                    "baseline_arm": study.baseline, "overrides": list(study.overrides)}
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except ValueError as e:
                raise ValueError(f"{path}: not a readable study manifest ({e})") from None
            old = {k: data.get(k) for k in identity}
            if old != identity:
                diff = next(k for k in identity if old[k] != identity[k])
                raise ValueError(f"{path}: this directory holds a different study ({diff} differs); "
                                 "choose another --out or remove it")
            m = cls(path, data)
            m.data["rounds_count"] = max(int(data.get("rounds_count", 0)), study.rounds)
            known = {(e["round"], e["arm"]) for e in data["arm_rounds"]}
            for r, a in order:
                if (r, a) not in known:
                    m.data["arm_rounds"].append(_entry(r, a))
            m.data["order"] = [[r, a] for r, a in order]
            m.data["resumed_at"] = [*data.get("resumed_at", []), time.time()]
            m.data["ended_at"] = None
            m.data["complete"] = False
            return m
        data = {
            "study_format_version": STUDY_FORMAT_VERSION,
            "tokenswarm_version": __version__,
            "python_executable": sys.executable,
            **identity,
            "study_source": study.source,
            "rounds_count": study.rounds,
            "order": [[r, a] for r, a in order],
            "machine": machine_info(),
            "started_at": time.time(),
            "ended_at": None,
            "resumed_at": [],
            "complete": False,
            "failures": [],
            "arm_rounds": [_entry(r, a) for r, a in order],
        }
        out.mkdir(parents=True, exist_ok=True)
        m = cls(path, data)
        m.save()
        return m

    def entry(self, round_no: int, arm: str) -> dict[str, Any]:
        """The state of one arm-round."""
        return next(e for e in self.data["arm_rounds"] if e["round"] == round_no and e["arm"] == arm)

    def update(self, round_no: int, arm: str, **fields: Any) -> None:
        """Change one arm-round's state and save."""
        self.entry(round_no, arm).update(fields)
        self.save()

    def fail(self, round_no: int, arm: str, message: str) -> None:
        """Mark an arm-round failed with its message (kept across resumes)."""
        self.data["failures"].append({"round": round_no, "arm": arm, "at": time.time(), "message": message})
        self.update(round_no, arm, status="failed", error=message, ended_at=time.time())

    def finish(self) -> None:
        """All arm-rounds done."""
        self.data["ended_at"] = time.time()
        self.data["complete"] = all(e["status"] == "done" for e in self.data["arm_rounds"])
        self.save()

    def save(self) -> None:
        """Write atomically (a reader never sees half a file)."""
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(redact(self.data), indent=2, sort_keys=False))  # the one redaction, as every sink
        os.replace(tmp, self.path)


def _entry(round_no: int, arm: str) -> dict[str, Any]:
    return {"round": round_no, "arm": arm, "status": "pending", "run_dir": run_dir_name(arm, round_no),
            "base_url": None, "models": None, "started_at": None, "ended_at": None, "run_exit_status": None,
            "server_exit_status": None, "warmup_problems": [], "error": None, "attempts_count": 0,
            "set_aside_dirs": []}
