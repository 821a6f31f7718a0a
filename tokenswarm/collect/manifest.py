"""Writing the run manifest: a :class:`ManifestFile` holds the current :class:`RunManifest` value.

The manifest itself is a frozen value (:mod:`tokenswarm.manifest`); while the run goes, the
controller replaces it with an updated copy (:meth:`ManifestFile.update`, the step methods) and
writes it atomically (tmp + rename) after every change, so a killed run leaves a readable file.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tokenswarm import __version__
from tokenswarm.manifest import LoadStep, RunManifest
from tokenswarm.redact import redact


def new_run_id(now: float | None = None) -> str:
    t = time.localtime(now or time.time())
    return time.strftime("%Y%m%d-%H%M%S", t) + f"-{os.getpid() % 10000:04d}"


def default_run_dir(run_id: str, root: str = "runs") -> Path:
    return Path(root) / run_id


def new_manifest(run_id: str, *, scenario: dict[str, Any] | None, scenario_name: str | None,
                 command: list[str], load_mode: str | None, started_at: float | None = None) -> RunManifest:
    """The manifest of a run that starts now, with this process's versions and host."""
    import locust  # Locust for its version only: the manifest model is read without it


    return RunManifest(run_id=run_id, tokenswarm_version=__version__, locust_version=locust.__version__,
                       python_version=platform.python_version(), host=socket.gethostname(),
                       command=tuple(command), scenario_name=scenario_name, scenario=scenario,
                       load_mode=load_mode, started_at=time.time() if started_at is None else started_at)


class ManifestFile:
    """``<run_dir>/manifest.json`` and the value last written to it (:attr:`current`)."""

    def __init__(self, run_dir: str | os.PathLike[str], manifest: RunManifest) -> None:
        self.path = Path(run_dir) / "manifest.json"
        self.current = manifest

    def update(self, **changes: Any) -> RunManifest:
        """Replace fields of the current manifest (not written until :meth:`write`)."""
        self.current = replace(self.current, **changes)
        return self.current

    def warn(self, text: str) -> None:
        self.current = self.current.with_warning(text)

    # -- the load plan's steps: one appended at its warm-up, stamped when steady and when done --
    def start_step(self, index: int, name: str, kind: str, target: float, at: float,
                   steady_at: float | None = None) -> None:
        """Append a step starting at ``at``; the previous step, if still open, ends there."""
        steps = list(self.current.steps)
        if steps and steps[-1].ended_at is None:
            steps[-1] = replace(steps[-1], ended_at=at)
        steps.append(LoadStep(index=index, name=name, kind=kind, target=float(target), started_at=at,
                              steady_at=steady_at))
        self.update(steps=tuple(steps))

    def mark_last_step(self, *, steady_at: float | None = None, ended_at: float | None = None) -> LoadStep:
        """Set ``steady_at`` and/or ``ended_at`` of the last step (``None`` leaves it); returns it."""
        steps = list(self.current.steps)
        last = steps[-1]
        steps[-1] = replace(last, steady_at=last.steady_at if steady_at is None else steady_at,
                            ended_at=last.ended_at if ended_at is None else ended_at)
        self.update(steps=tuple(steps))
        return steps[-1]

    def close_open_steps(self, at: float, *, partial: bool = False) -> None:
        """Every step without an end ends at ``at`` (the run's end); ``partial``: the run was cut
        short, so such a step did not run its planned length."""
        self.update(steps=tuple(s if s.ended_at is not None else replace(s, ended_at=at, partial=partial)
                                for s in self.current.steps))

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(redact(self.current.to_json()), indent=2, default=str))
        os.replace(tmp, self.path)


def command_line() -> list[str]:
    return [os.path.basename(sys.argv[0])] + sys.argv[1:]
