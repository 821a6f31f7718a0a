"""Request-body fields a scenario may set at more than one level: model, sampling, extra_body.

``model`` (on the target, or one class: a split over models), ``sampling`` (on the traffic,
overridden field by field in a class) and ``extra_body`` (target, traffic and class, merged in
that order) are read by the same parser wherever they appear. ``extra_body`` refuses the
sampling fields: one place per field.
"""

from __future__ import annotations

import math
from typing import Any

from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import RESERVED_BODY_FIELDS, Sampling

_SAMPLING = ("temperature", "top_p", "seed", "stop", "ignore_eos")


def _parse_extra_body(sec: _Section, key: str = "extra_body") -> dict[str, Any]:
    """``extra_body``: a JSON object of request-body fields passed through as given.

    Fields tokenswarm sets itself (model, messages, max_tokens...) and the sampling fields
    (one name per meaning: ``sampling.temperature``, not ``extra_body.temperature``) are refused.
    """
    import orjson

    raw = sec.raw(key, {})
    if not isinstance(raw, dict):
        raise sec.err(key, "a mapping of request-body field -> JSON value (e.g. {top_k: 20})")
    for name, value in raw.items():
        at = sec.at(f"{key}.{name}")
        if not isinstance(name, str) or not name:
            raise ScenarioError(sec.file, at, "a field name (a non-empty string)", name)
        if name in RESERVED_BODY_FIELDS:
            raise ScenarioError(sec.file, at, "a field tokenswarm does not set itself", name,
                                problem="set by tokenswarm (max_tokens is drawn from the class's max_tokens)")
        if name in _SAMPLING:
            raise ScenarioError(sec.file, at, f"sampling.{name} (one place per field)", name,
                                problem="a sampling field")
        try:
            orjson.dumps(value)
        except TypeError:
            raise ScenarioError(sec.file, at, "a JSON value (string, number, boolean, null, list, mapping)",
                                value) from None
    return dict(raw)


def _parse_models(sec: _Section, one_name: bool = False) -> tuple[tuple[str, float], ...]:
    """``model`` as a mapping ``{name: weight}`` (a split over models/adapters); ``()`` when it is not one.

    A class's ``model`` may also be one name (all its requests ask for it): ``((name, 1.0),)``.
    """
    raw = sec.raw("model", None)
    if isinstance(raw, str) and one_name:
        if not raw or raw == "auto":
            raise sec.err("model", "a model name (auto is for target.model) or a mapping of model name to weight")
        return ((raw, 1.0),)
    if not isinstance(raw, dict):
        if one_name:
            raise sec.err("model", "a model name or a mapping of model name to weight", raw)
        return ()
    out = []
    for name in raw:
        if not isinstance(name, str) or not name or name == "auto":
            raise sec.err("model", "model names (not auto) mapped to weights >= 0", name)
        w = raw[name]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ScenarioError(sec.file, sec.at(f"model.{name}"), "a weight >= 0", w)
        out.append((name, float(w)))
    if not out or sum(w for _, w in out) <= 0:
        raise sec.err("model", "at least one model with weight > 0", raw)
    return tuple(out)


def _parse_sampling(s: _Section, base: Sampling) -> Sampling:
    if "max_tokens" in s.data:
        raise ScenarioError(
            s.file,
            s.at("max_tokens"),
            "max_tokens on the class (a distribution: each request's max_tokens is drawn from it)",
            s.data["max_tokens"],
            problem="not a sampling field",
        )
    s = _Section(s.data, s.path, s.file, _SAMPLING)
    stop = base.stop
    if s.has("stop"):
        raw = s.data["stop"]
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            raise s.err("stop", "a non-empty string or a list of them")
        stop = tuple(raw)
    return Sampling(
        temperature=s.num("temperature", base.temperature, ge=0),
        top_p=s.num("top_p", base.top_p, gt=0, le=1),
        seed=s.num("seed", base.seed, integer=True),
        stop=stop,
        ignore_eos=s.bool_("ignore_eos", base.ignore_eos),
    )
