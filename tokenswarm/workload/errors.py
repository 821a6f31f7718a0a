"""The scenario error type: every validation problem is raised as a :class:`ScenarioError`.

It sits at the root of the workload, below the scenario parser and the user datasets it reads:
a dataset error (:class:`tokenswarm.workload.corpora.DatasetError`) is a ``ScenarioError``, so
a bad dataset named by a scenario fails like any other field, while the scenario reads the
datasets; with the type in either package, the two would import each other.

``_MISSING`` marks "no value given" (distinct from ``None``, which YAML can hold) for the
error message and for the field reader (:mod:`tokenswarm.workload.scenario.fields`).
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


class ScenarioError(ValueError):
    """Invalid scenario. ``str(e) == "<file>: <field>: expected <what>, got <value>"``.

    ``problem`` (e.g. ``"unknown field"``) is put before ``expected`` when given. Secrets are
    never echoed: callers pass ``"***"`` as ``got`` for them.
    """

    def __init__(
        self,
        file: str,
        field: str,
        expected: str,
        got: Any = _MISSING,
        problem: str | None = None,
        hint: str | None = None,
    ):
        self.file = str(file)
        self.field = field
        self.expected = expected
        self.got = None if got is _MISSING else got
        self.problem = problem
        self.hint = hint  # a close known name for an unknown one ("did you mean ...?")
        shown = "nothing" if got is _MISSING else _show(got)
        head = f"{problem}, " if problem else ""
        tail = f" (did you mean {hint!r}?)" if hint else ""
        super().__init__(f"{self.file}: {field}: {head}expected {expected}, got {shown}{tail}")


class ScenarioErrors(ScenarioError):
    """Several problems in one scenario file, reported together (one line each).

    A :class:`ScenarioError` itself, so callers that catch one catch all; ``file``, ``field``
    and ``expected`` are those of the first problem, ``errors`` holds every one in file order.
    """

    def __init__(self, errors: list[ScenarioError]):
        first = errors[0]
        super().__init__(first.file, first.field, first.expected, first.got, first.problem, first.hint)
        self.errors = list(errors)
        lines = [f"{first.file}: {len(errors)} problems in the scenario:"]
        lines += [f"  {e}" for e in errors]
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."
