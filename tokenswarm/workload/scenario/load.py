"""The ``load`` section: the run's load plan.

Steps of users (``closed``) or of request rates (``open``), with their arrival process and
adaptive steps (``until``); ``replay`` of a trace, read now so that a bad line stops the run
before any request; ``search`` and ``sweep``, whose probes choose their own steps.
"""

from __future__ import annotations

import math
from pathlib import Path

from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import (
    ARRIVALS,
    LOAD_MODES,
    SEARCH_OVER,
    UNTIL_METRICS,
    LoadConfig,
    SearchConfig,
    SweepConfig,
    UntilConfig,
)
from tokenswarm.workload.scenario.paths import _resolve_file

_LOAD = (
    "mode",
    "steps",
    "warmup_s",
    "step_duration_s",
    "spawn_rate",
    "arrival",
    "burstiness",
    "max_in_flight",
    "stop_timeout_s",
    "ramp_s",
    "report_interval_s",
    "trace",
    "trace_format",
    "speed",
    "trace_block_tokens",
    "until",
    "search",
    "sweep",
)
_UNTIL = ("min_requests_per_task", "precision", "metric", "max_step_s")
_SEARCH = ("over", "start", "factor", "max", "resolution", "max_step_s", "drain_max_s")
_SWEEP = ("steps", "max_concurrency", "drain_max_s")
#: the longest a probe's load is held for its last requests, by default (the default timeouts.total_s)
DRAIN_MAX_S = 600.0


def _parse_replay(ld: _Section, base_dir: Path) -> LoadConfig:
    """``mode: replay``: the trace is read now, so a bad line stops the run before any request."""
    from tokenswarm.workload.trace import TRACE_FORMATS, TraceError, load_trace

    for key in ("steps", "arrival", "burstiness", "ramp_s", "warmup_s"):
        if ld.has(key):
            raise ld.err(key, f"no {key} in mode replay (the trace sets the schedule)")
    if not ld.has("trace"):
        raise ld.err("trace", "the path of a trace file (Mooncake JSONL, BurstGPT CSV or tokenswarm records)")
    path = _resolve_file(ld.str_("trace"), base_dir)
    if path is None:
        raise ld.err("trace", f"an existing trace file (relative to {base_dir} or the working directory)")
    fmt = ld.str_("trace_format", "auto", TRACE_FORMATS)
    speed = ld.num("speed", 1.0, gt=0)
    try:
        trace = load_trace(path, fmt)
    except TraceError as exc:
        raise ScenarioError(ld.file, ld.at("trace"), "a valid trace", str(exc)) from None
    duration = trace.span_s / speed + 1.0  # the steady window ends 1 s after the last scheduled request
    rate = len(trace.entries) / duration
    return LoadConfig(
        mode="replay",
        steps=(rate,),
        warmup_s=0.0,  # the schedule starts with the steady window (trim a trace to drop its start)
        step_duration_s=duration,
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0),
        arrival="constant",
        burstiness=1.0,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=0.0,
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True),
        trace=path,
        trace_format=trace.format,
        speed=speed,
        trace_block_tokens=ld.num("trace_block_tokens", 512, ge=1, integer=True),
    )


def _parse_load(top: _Section, base_dir: Path | None = None) -> LoadConfig:
    ld = top.section("load", _LOAD)
    mode = ld.str_("mode", "closed", LOAD_MODES)
    if mode == "replay":
        return _parse_replay(ld, base_dir or Path.cwd())
    for key in ("trace", "trace_format", "speed", "trace_block_tokens"):
        if ld.has(key):
            raise ld.err(key, f"no {key} unless mode is replay")
    for key in ("search", "sweep"):
        if ld.has(key) and mode != key:
            raise ld.err(key, f"no {key} unless mode is {key}")
    if mode in ("search", "sweep"):
        return _parse_probing(ld, mode)
    raw_steps = ld.raw("steps", [1])
    if isinstance(raw_steps, (int, float)) and not isinstance(raw_steps, bool):
        raw_steps = [raw_steps]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ld.err(
            "steps", "a non-empty list of " + ("user counts" if mode == "closed" else "request rates (req/s)")
        )
    steps = []
    for i, v in enumerate(raw_steps):
        ok_num = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if mode == "closed" and not (ok_num and v >= 1 and v == int(v)):
            raise ScenarioError(
                ld.file, ld.at(f"steps[{i}]"), "a whole number of users >= 1 (mode closed)", v
            )
        if mode == "open" and not (ok_num and v > 0):
            raise ScenarioError(
                ld.file, ld.at(f"steps[{i}]"), "a positive request rate in req/s (mode open)", v
            )
        steps.append(float(v))
    arrival = ld.str_("arrival", "poisson", ARRIVALS)
    burstiness = ld.num("burstiness", 1.0, gt=0)
    if arrival != "gamma" and burstiness != 1.0:
        raise ld.err("burstiness", "1.0 unless arrival is gamma (poisson is gamma with shape 1)")
    return LoadConfig(
        mode=mode,
        steps=tuple(steps),
        warmup_s=ld.num("warmup_s", 10.0, ge=0, duration=True),
        step_duration_s=ld.num("step_duration_s", 30.0, gt=0, duration=True),
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0),
        arrival=arrival,
        burstiness=burstiness,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=ld.num("ramp_s", 0.0, ge=0, duration=True),
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True),
        until=_parse_until(ld),
    )


def _parse_until(ld: _Section) -> UntilConfig | None:
    """``load.until``: at least one goal, and always a cap (a step must end)."""
    if not ld.has("until"):
        return None
    un = ld.section("until", _UNTIL)
    if not (un.has("min_requests_per_task") or un.has("precision")):
        raise ld.err("until", "a mapping with min_requests_per_task and/or precision, and max_step_s")
    if not un.has("max_step_s"):
        raise un.err("max_step_s", "a cap on the steady window in seconds (an adaptive step must end)", None)
    step_s = ld.num("step_duration_s", 30.0, gt=0, duration=True)
    max_step_s = un.num("max_step_s", None, gt=0, duration=True)
    if max_step_s < step_s:
        raise un.err("max_step_s", f"a cap >= load.step_duration_s ({step_s:g} s), the shortest steady window")
    return UntilConfig(
        max_step_s=max_step_s,
        min_requests_per_task=un.num("min_requests_per_task", None, ge=1, integer=True),
        precision=un.num("precision", None, gt=0, le=1),
        metric=un.str_("metric", "request_output_tps", UNTIL_METRICS),
    )


def _parse_probing(ld: _Section, mode: str) -> LoadConfig:
    """``mode: search`` / ``mode: sweep``: the plan finds its steps (``steps`` holds the first probe)."""
    if ld.raw("steps") is not None:  # (``--set load.steps=null`` removes a file's steps)
        raise ld.err("steps", f"no steps in mode {mode} (the {mode} chooses them; see load.{mode})")
    if ld.has("until"):  # a probe already extends itself until its SLO checks have their samples
        raise ld.err("until", f"no until in mode {mode}: each probe's window is extended for the sample-size rule "
                              "by itself (on the command line: --set load.until=null)")
    search = sweep = None
    step_s = ld.num("step_duration_s", 30.0, gt=0, duration=True)
    if mode == "search":
        se = ld.section("search", _SEARCH)
        over = se.str_("over", "concurrency", SEARCH_OVER)
        users = over == "concurrency"
        if not users:
            for key in ("start", "max"):
                if not se.has(key):
                    raise se.err(key, "a request rate in req/s (required when searching over rate)")
        start = se.num("start", 1, ge=1, integer=True) if users else se.num("start", None, gt=0)
        top = se.num("max", 256, ge=1, integer=True) if users else se.num("max", None, gt=0)
        if top < start:
            raise se.err("max", f"a load >= start ({start:g})")
        resolution = se.num("resolution", 1 if users else start / 4, ge=1 if users else None, gt=None if users else 0,
                            integer=users)
        search = SearchConfig(over=over, start=float(start), factor=se.num("factor", 2.0, gt=1), max=float(top),
                              resolution=float(resolution),
                              max_step_s=se.num("max_step_s", 5 * step_s, gt=0, duration=True),
                              drain_max_s=se.num("drain_max_s", DRAIN_MAX_S, gt=0, duration=True))
        if search.max_step_s < step_s:
            raise se.err("max_step_s", f"a duration >= load.step_duration_s ({step_s:g} s)")
        first = search.start
    else:
        sw = ld.section("sweep", _SWEEP)
        sweep = SweepConfig(steps=sw.num("steps", 6, ge=1, integer=True),
                            max_concurrency=sw.num("max_concurrency", 64, ge=2, integer=True),
                            drain_max_s=sw.num("drain_max_s", DRAIN_MAX_S, gt=0, duration=True))
        first = float(sweep.max_concurrency)  # saturation first
    arrival = ld.str_("arrival", "poisson", ARRIVALS)
    burstiness = ld.num("burstiness", 1.0, gt=0)
    if arrival != "gamma" and burstiness != 1.0:
        raise ld.err("burstiness", "1.0 unless arrival is gamma (poisson is gamma with shape 1)")
    return LoadConfig(
        mode=mode, steps=(first,), warmup_s=ld.num("warmup_s", 10.0, ge=0, duration=True), step_duration_s=step_s,
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0), arrival=arrival, burstiness=burstiness,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=ld.num("ramp_s", 0.0, ge=0, duration=True),
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True), search=search, sweep=sweep)
