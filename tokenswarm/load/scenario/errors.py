"""The scenario error type: every validation problem is raised as a :class:`ScenarioError`.

``_MISSING`` marks "no value given" (distinct from ``None``, which YAML can hold) for the
error message and for the field reader (:mod:`tokenswarm.load.scenario.fields`).
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


class ScenarioError(ValueError):
    """Invalid scenario. ``str(e) == "<file>: <field>: expected <what>, got <value>"``.

    ``problem`` (e.g. ``"unknown field"``) is put before ``expected`` when given. Secrets are
    never echoed: callers pass ``"***"`` as ``got`` for them.
    """

    def __init__(self, file: str, field: str, expected: str, got: Any = _MISSING, problem: str | None = None):
        self.file = str(file)
        self.field = field
        self.expected = expected
        self.got = None if got is _MISSING else got
        self.problem = problem
        shown = "nothing" if got is _MISSING else _show(got)
        head = f"{problem}, " if problem else ""
        super().__init__(f"{self.file}: {field}: {head}expected {expected}, got {shown}")


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."
