"""Length and timing distributions used by scenarios (prompt/output tokens, turns, think time).

A distribution is written in YAML as a mapping with a ``dist`` key, or as a bare number
(shorthand for ``fixed``)::

    {dist: fixed, value: 128}
    {dist: uniform, min: 32, max: 256}
    {dist: normal, mean: 300, stddev: 50, min: 1, max: 1000}
    {dist: lognormal, mean: 60, sigma: 0.5, min: 8, max: 400}

``lognormal``: ``mean`` is the mean of the distribution itself in natural units (tokens,
seconds), ``sigma`` the standard deviation of ``log(x)``. So ``mu = ln(mean) - sigma**2 / 2``.
Every distribution is clipped to ``[min, max]`` when given (clipping moves the realised
mean a little; it does not redraw). Sampling takes an explicit ``random.Random`` so results
are reproducible per seed; the global RNG is never used.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

KINDS = ("fixed", "uniform", "normal", "lognormal")

#: the keys each kind accepts (besides ``dist``)
_KEYS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "stddev", "min", "max"),
    "lognormal": ("mean", "sigma", "min", "max"),
}


class DistSpecError(ValueError):
    """A distribution spec is invalid. ``field`` is the dotted path of the offending key.

    ``str(e)`` is ``"<field>: expected <what>, got <value>"``; the scenario loader prefixes the
    file name and re-raises it as a ``ScenarioError``.
    """

    def __init__(self, field: str, expected: str, got: Any):
        self.field = field
        self.expected = expected
        self.got = got
        super().__init__(f"{field}: expected {expected}, got {got!r}")


@runtime_checkable
class Dist(Protocol):
    """A clipped one-dimensional distribution."""

    @property
    def spec(self) -> dict[str, Any]:
        """The cleaned specification it was made from (what a scenario echo shows)."""
        ...

    def sample(self, rng: random.Random) -> float:
        """One draw, clipped to ``[min, max]``."""
        ...

    def sample_int(self, rng: random.Random) -> int:
        """One draw rounded to the nearest integer, still within ``[min, max]``."""
        ...

    @property
    def mean(self) -> float:
        """Nominal mean (before clipping): what the scenario asks for on average."""
        ...


@dataclass(frozen=True)
class _Base:
    lo: float | None
    hi: float | None
    spec: dict[str, Any] = field(compare=False)

    def _clip(self, x: float) -> float:
        if self.lo is not None and x < self.lo:
            return self.lo
        if self.hi is not None and x > self.hi:
            return self.hi
        return x

    def _draw(self, rng: random.Random) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def sample(self, rng: random.Random) -> float:
        return self._clip(self._draw(rng))

    def sample_int(self, rng: random.Random) -> int:
        n = int(round(self.sample(rng)))
        # rounding can step just outside a fractional bound; pull it back inside
        if self.lo is not None and n < self.lo:
            n = math.ceil(self.lo)
        if self.hi is not None and n > self.hi:
            n = math.floor(self.hi)
        return n

    @property
    def mean(self) -> float:
        """Nominal mean (before clipping); used for sizing, not for statistics."""
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(_Base):
    value: float = 0.0

    def _draw(self, rng: random.Random) -> float:
        return self.value

    @property
    def mean(self) -> float:
        return self.value


@dataclass(frozen=True)
class Uniform(_Base):
    lo: float
    hi: float

    def _draw(self, rng: random.Random) -> float:
        return rng.uniform(self.lo, self.hi)

    def sample_int(self, rng: random.Random) -> int:
        # uniform over the integers in [min, max], both ends equally likely
        return rng.randint(math.ceil(self.lo), math.floor(self.hi))

    @property
    def mean(self) -> float:
        return (self.lo + self.hi) / 2


@dataclass(frozen=True)
class Normal(_Base):
    mu: float = 0.0
    stddev: float = 0.0

    def _draw(self, rng: random.Random) -> float:
        return rng.gauss(self.mu, self.stddev)

    @property
    def mean(self) -> float:
        return self.mu


@dataclass(frozen=True)
class LogNormal(_Base):
    mean_value: float = 1.0
    sigma: float = 0.0

    def _draw(self, rng: random.Random) -> float:
        mu = math.log(self.mean_value) - self.sigma**2 / 2
        return rng.lognormvariate(mu, self.sigma)

    @property
    def mean(self) -> float:
        return self.mean_value


def _num(spec: dict[str, Any], key: str, where: str, *, positive: bool = False, nonneg: bool = False) -> float:
    v = spec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise DistSpecError(f"{where}.{key}", "a finite number", v)
    if positive and v <= 0:
        raise DistSpecError(f"{where}.{key}", "a number > 0", v)
    if nonneg and v < 0:
        raise DistSpecError(f"{where}.{key}", "a number >= 0", v)
    return float(v)


def make_dist(spec: Any, where: str, *, floor: float | None = None, integer: bool = False) -> Dist:
    """Build a distribution from its YAML spec.

    ``where`` is the dotted field path used in error messages. ``floor`` is the smallest
    value that makes sense (e.g. 1 for token counts, 0 for seconds): an explicit ``min``/
    ``value`` below it is an error, and when ``min`` is omitted draws are clipped at ``floor``.
    ``integer`` requires integral bounds (token counts, turns). Raises :class:`DistSpecError`.
    """
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        spec = {"dist": "fixed", "value": spec}
    if not isinstance(spec, dict):
        raise DistSpecError(
            where, "a number or a mapping with 'dist' (one of " + ", ".join(KINDS) + ")", spec
        )
    kind = spec.get("dist")
    if kind not in KINDS:
        raise DistSpecError(f"{where}.dist", "one of " + ", ".join(KINDS), kind)
    allowed = _KEYS[kind]
    for key in spec:
        if key != "dist" and key not in allowed:
            raise DistSpecError(
                f"{where}.{key}", f"unknown field, expected one of dist, {', '.join(allowed)}", key
            )
    required = {
        "fixed": ("value",),
        "uniform": ("min", "max"),
        "normal": ("mean", "stddev"),
        "lognormal": ("mean", "sigma"),
    }[kind]
    for key in required:
        if key not in spec:
            raise DistSpecError(f"{where}.{key}", f"a number ({kind} needs {', '.join(required)})", None)

    lo = _num(spec, "min", where) if "min" in spec else None
    hi = _num(spec, "max", where) if "max" in spec else None
    for key, v in (("min", lo), ("max", hi)):
        if v is None:
            continue
        if integer and v != int(v):
            raise DistSpecError(f"{where}.{key}", "an integer", spec[key])
        if floor is not None and v < floor:
            raise DistSpecError(f"{where}.{key}", f"a number >= {floor:g}", spec[key])
    if lo is not None and hi is not None and lo > hi:
        raise DistSpecError(f"{where}.min", f"min <= max ({hi:g})", spec["min"])
    if lo is None and floor is not None:
        lo = float(floor)

    clean = {"dist": kind, **{k: spec[k] for k in allowed if k in spec}}
    if kind == "fixed":
        value = _num(spec, "value", where)
        if floor is not None and value < floor:
            raise DistSpecError(f"{where}.value", f"a number >= {floor:g}", spec["value"])
        if integer and value != int(value):
            raise DistSpecError(f"{where}.value", "an integer", spec["value"])
        return Fixed(lo=None, hi=None, spec=clean, value=value)
    if kind == "uniform":
        assert lo is not None and hi is not None  # both required for uniform, checked above
        if integer and math.ceil(lo) > math.floor(hi):
            raise DistSpecError(
                f"{where}.max", "an integer range containing at least one integer", spec["max"]
            )
        return Uniform(lo=lo, hi=hi, spec=clean)
    if kind == "normal":
        mean = _num(spec, "mean", where)
        stddev = _num(spec, "stddev", where, nonneg=True)
        return Normal(lo=lo, hi=hi, spec=clean, mu=mean, stddev=stddev)
    mean = _num(spec, "mean", where, positive=True)
    sigma = _num(spec, "sigma", where, nonneg=True)
    return LogNormal(lo=lo, hi=hi, spec=clean, mean_value=mean, sigma=sigma)
