"""The field reader: typed access to one mapping of the scenario YAML.

:class:`_Section` rejects unknown keys and reads strings, booleans, bounded numbers,
durations (``"30s"``, ``"10m"``, ``"4h"``) and length/time distributions; every problem is a
:class:`~tokenswarm.workload.errors.ScenarioError` naming the dotted path of the field.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import math
import operator
import re
from collections.abc import Iterator
from typing import Any, Callable

from tokenswarm.workload.distributions import Dist, DistSpecError, make_dist
from tokenswarm.workload.errors import _MISSING, ScenarioError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

# While a whole file is validated, unknown fields are noted here (and skipped) instead of
# raised, so that one run of the parser reports every one of them.
_UNKNOWN_FIELDS: contextvars.ContextVar[list[ScenarioError] | None] = contextvars.ContextVar(
    "tokenswarm_unknown_fields", default=None
)


@contextlib.contextmanager
def collecting_unknown_fields() -> Iterator[list[ScenarioError]]:
    """Within this block, :class:`_Section` appends unknown-field errors to the yielded list."""
    found: list[ScenarioError] = []
    token = _UNKNOWN_FIELDS.set(found)
    try:
        yield found
    finally:
        _UNKNOWN_FIELDS.reset(token)


def unknown_field(file: str, path: str, key: str, known: tuple[str, ...]) -> ScenarioError:
    """The error for an unknown key, with the closest known name as a hint (difflib)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return ScenarioError(
        file, path, "one of " + ", ".join(known), key, problem="unknown field", hint=close[0] if close else None
    )


class _Section:
    """Typed access to one mapping of the YAML, with dotted paths for errors and unknown-key checks."""

    def __init__(self, data: Any, path: str, file: str, known: tuple[str, ...]):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(file, path or "(top level)", "a mapping", data)
        self.data, self.path, self.file, self.known = data, path, file, known
        unknown = [key for key in data if not isinstance(key, str) or key not in known]
        if unknown:
            errors = [unknown_field(file, self.at(str(key)), str(key), known) for key in unknown]
            found = _UNKNOWN_FIELDS.get()
            if found is None:
                raise errors[0]
            found.extend(errors)
            self.data = {k: v for k, v in data.items() if k not in unknown}

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def err(self, key: str, expected: str, got: Any = _MISSING) -> ScenarioError:
        return ScenarioError(
            self.file, self.at(key), expected, self.data.get(key, got) if got is _MISSING else got
        )

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def str_(self, key: str, default: Any = _MISSING, choices: tuple[str, ...] | None = None) -> Any:
        if not self.has(key):
            if default is _MISSING:
                raise self.err(key, "a string" if not choices else "one of " + ", ".join(choices))
            return default
        v = self.data[key]
        if choices is not None:
            if v not in choices:
                raise self.err(key, "one of " + ", ".join(choices))
        elif not isinstance(v, str):
            raise self.err(key, "a string")
        return v

    def bool_(self, key: str, default: Any) -> Any:
        if not self.has(key):
            return default
        v = self.data[key]
        if not isinstance(v, bool):
            raise self.err(key, "true or false")
        return v

    def num(
        self,
        key: str,
        default: Any,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        integer: bool = False,
        duration: bool = False,
    ) -> Any:
        if not self.has(key):
            return default
        v = self.data[key]
        if duration and isinstance(v, str):
            m = _DURATION.match(v)
            if not m:
                raise self.err(key, "a number of seconds or a duration like '30s', '10m', '4h'")
            v = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        what = "an integer" if integer else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.err(key, what)
        if integer and v != int(v):
            raise self.err(key, what)
        checks: tuple[tuple[float | None, Callable[[float, float], bool], str], ...] = (
            (ge, operator.ge, ">="),
            (gt, operator.gt, ">"),
            (le, operator.le, "<="),
        )
        for bound, ok, text in checks:
            if bound is not None and not ok(v, bound):
                raise self.err(key, f"{what} {text} {bound:g}")
        return int(v) if integer else float(v)

    def dist(self, key: str, default: Any, *, floor: float | None, integer: bool) -> Dist | None:
        spec = self.data.get(key) if self.has(key) else default
        if spec is None:
            return None
        try:
            return make_dist(spec, self.at(key), floor=floor, integer=integer)
        except DistSpecError as exc:
            raise ScenarioError(self.file, exc.field, exc.expected, exc.got) from None

    def required_dist(self, key: str, default: Any, *, floor: float | None, integer: bool) -> Dist:
        """:meth:`dist` for a field a task cannot do without: ``null`` is an error naming it."""
        dist = self.dist(key, default, floor=floor, integer=integer)
        if dist is None:
            raise self.err(key, "a number or a distribution (this field cannot be null)")
        return dist

    def section(self, key: str, known: tuple[str, ...]) -> _Section:
        return _Section(self.data.get(key), self.at(key), self.file, known)
