"""Process-global handle on the current run (one Locust process runs one test at a time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the name only: the context imports the wire, this module nothing
    from tokenswarm.load.context import RunContext

_state: dict[str, Any] = {"context": None, "run": None}


def context() -> Any:
    """The :class:`~tokenswarm.load.context.RunContext` of the running test."""
    ctx = _state["context"]
    if ctx is None:
        raise RuntimeError("tokenswarm: no run context - is the tokenswarm plugin loaded (locustfiles/llm.py)?")
    return ctx


def set_context(ctx: Any) -> None:
    _state["context"] = ctx


def run() -> Any:
    """The master/local :class:`~tokenswarm.orchestrate.controller.RunController` (None on workers)."""
    return _state["run"]


def set_run(controller: Any) -> None:
    _state["run"] = controller


def context_or_none() -> RunContext | None:
    """The running test's context, or None (no run, or one aborted at start)."""
    ctx: RunContext | None = _state["context"]
    return ctx
