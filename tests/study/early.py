"""The long documented recipes, started together rather than one after another.

The demo, the study of docs/studies.md, the README's first run and the CI stage of docs/ci.md
take 1.5 to 8 minutes each, and spend nearly all of it waiting on the simulator's pace (measured
on 2026-12-03 in a four-worker run: the README's run 7.5 s of CPU in 204 s and its simulator
5.6 s; the study's runs 4-5 s each). Run one after another they would take ~17 minutes; side by
side, as long as the longest. A one-process run of the suite starts them with its first test's
set-up; under xdist the worker that reaches their file (tests/study/test_recipes.py) starts them
there, while the other workers run the rest. Either way they start as processes that write to
files (nothing has to read their pipes; a recipe with a simulator waits the second or two until
it answers), at most :data:`MAX_RUNNING` at a time, and every test's set-up starts the next one
when a place is free (no thread: Locust's gevent patching makes threads greenlets that would
only run when a test yields). Each recipe's test then waits for its process and asserts on its
output exactly as it would on a run of its own.

Only the recipes whose tests are selected start; one whose test comes before its turn runs then,
the same way. A run of the suite that ends early kills whatever is still running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.waiting import wait_until
from tokenswarm.wire.ports import free_port

#: recipes running at once: all four documented ones (each, with its simulator, uses a few per
#: cent of a core)
MAX_RUNNING = 4


@dataclass(frozen=True)
class Recipe:
    """A documented recipe as processes: an optional simulator, then the command under test."""

    name: str
    #: the command, given its work directory and the simulator's port (None without one)
    argv: Callable[[Path, int | None], list[str]]
    #: the simulator's command for a port, when the recipe starts one before its command
    sim_argv: Callable[[int], list[str]] | None = None
    #: where the command runs (default: its work directory)
    cwd: Path | None = None
    timeout_s: float = 600


def _sim_answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=0.2).read()
    except OSError:
        return False
    return True


def _kill(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(20)


class RecipeRun:
    """One recipe's processes in ``workdir``: simulator (if any) -> command -> finished."""

    def __init__(self, recipe: Recipe, workdir: Path) -> None:
        self.recipe, self.workdir = recipe, workdir
        self.sim: subprocess.Popen | None = None
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None  # the command's start (its timeout counts from here)

    def start(self) -> None:
        """Start the command, after its simulator (if any) answers: a second or two."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.recipe.sim_argv is not None:
            self.port = port = free_port()
            self.sim = sim = subprocess.Popen(self.recipe.sim_argv(port), cwd=self.workdir, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL, start_new_session=True)

            def answers() -> bool:
                assert sim.poll() is None, f"{self.recipe.name}: the simulator exited"
                return _sim_answers(port)

            wait_until(answers, 60, f"{self.recipe.name}: the simulator on port {port} to answer /v1/models",
                       every_s=0.1)
        with open(self.workdir / "stdout.txt", "wb") as out, open(self.workdir / "stderr.txt", "wb") as err:
            self.proc = subprocess.Popen(self.recipe.argv(self.workdir, self.port), cwd=self.recipe.cwd or self.workdir,
                                         stdout=out, stderr=err, start_new_session=True)
        self.started_at = time.monotonic()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def finish(self, meanwhile: Callable[[], None] = lambda: None) -> subprocess.CompletedProcess:
        """Wait for the command (starting it if it was not) and return what it printed;
        ``meanwhile`` is called about once a second while it runs (the others' turns)."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.started_at is not None
        try:
            while self.proc.poll() is None:
                left_s = self.recipe.timeout_s - (time.monotonic() - self.started_at)
                if left_s <= 0:
                    _kill(self.proc)
                    raise AssertionError(f"{self.recipe.name}: still running after {self.recipe.timeout_s:g} s; "
                                         f"its output is in {self.workdir}")
                try:
                    self.proc.wait(min(left_s, 1.0))
                except subprocess.TimeoutExpired:
                    meanwhile()
        finally:
            _kill(self.sim)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode,
                                           (self.workdir / "stdout.txt").read_text(errors="replace"),
                                           (self.workdir / "stderr.txt").read_text(errors="replace"))

    def kill(self) -> None:
        _kill(self.proc)
        _kill(self.sim)


class EarlyRecipes:
    """The session's recipes: those started early, and the order the rest start in."""

    def __init__(self, base_dir: Path, recipes: dict[str, Recipe], early: list[str]) -> None:
        self.base_dir, self.recipes = base_dir, recipes
        self.pending = list(early)  # to start early, in this order
        self.runs: dict[str, RecipeRun] = {}

    def start(self, names: list[str]) -> None:
        """Start ``names`` now, as places allow (those already started or queued are left as they are)."""
        self.pending += [n for n in names if n not in self.runs and n not in self.pending]
        self.tick()

    def tick(self) -> None:
        """From a test's set-up: stop the simulators of finished commands, start the next recipes
        if there is room."""
        for run in self.runs.values():
            if not run.running:
                _kill(run.sim)
        while self.pending and sum(r.running for r in self.runs.values()) < MAX_RUNNING:
            self._run(self.pending.pop(0)).start()

    def _run(self, name: str) -> RecipeRun:
        run = self.runs[name] = RecipeRun(self.recipes[name], self.base_dir / name)
        return run

    def outcome(self, name: str) -> tuple[subprocess.CompletedProcess, Path]:
        """The recipe's finished command and its work directory (run now if it was not started)."""
        if name in self.pending:
            self.pending.remove(name)
        run = self.runs.get(name) or self._run(name)
        done = run.finish(meanwhile=self.tick)
        self.tick()  # its place is free
        return done, run.workdir

    def close(self) -> None:
        self.pending.clear()
        for run in self.runs.values():
            run.kill()
