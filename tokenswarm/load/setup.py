"""Per-process set-up from a scenario: user-class settings, weights, the run context, the target.

Shared by the master/local :class:`~tokenswarm.orchestrate.controller.RunController` and the worker
wiring in :mod:`tokenswarm.orchestrate.plugin`.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tokenswarm.load.context import RunContext, make_worker_id
from tokenswarm.load.gcpolicy import paused_gc, quiet_gc


def scenario_slos(sc: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(sc.slo.overall)
    if sc.slo.per_task:
        out["per_task"] = {k: dict(v) for k, v in sc.slo.per_task.items()}
    return out


def planned_duration_s(sc: Any) -> float:
    """The load plan's nominal length (warm-up + steady of every step, plus ramps).

    An adaptive step (``load.until``) counts at its cap, ``max_step_s``: the longest it may run.
    """
    load = sc.load
    if load.search is not None or load.sweep is not None:
        # an upper bound: every probe extended to its cap and drained to its cap
        probes = load.search.max_probes() if load.search is not None else load.sweep.steps + 2
        longest = load.search.max_step_s if load.search is not None else load.step_duration_s
        drain = (load.search or load.sweep).drain_max_s
        top = load.search.max if load.search is not None else load.sweep.max_concurrency
        ramp = top / max(load.spawn_rate, 0.1) if load.loop == "closed" else 0.0
        return float(probes * (load.warmup_s + longest + drain + ramp + load.ramp_s) + load.stop_timeout_s)
    until = getattr(load, "until", None)
    steady_s = until.max_step_s if until is not None else load.step_duration_s
    ramp = sum(t / max(load.spawn_rate, 0.1) for t in load.steps) if load.mode == "closed" else 0.0
    ramp += len(load.steps) * load.ramp_s
    return float(len(load.steps) * (load.warmup_s + steady_s) + ramp + load.stop_timeout_s)


def sc_data(scenario: Any, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """What a worker needs to rebuild the scenario (the file may not exist on its machine)."""
    from tokenswarm.workload.scenario.yamlsafe import load_plain  # the file load_scenario read, bounded

    path = scenario.path
    raw = load_plain(Path(path).read_text()) if path and os.path.exists(path) else None
    return {"raw": raw, "path": path, "overrides": overrides}


def discover_model(base_url: str, target: Any) -> tuple[str | None, Any, dict[str, str]]:
    """``(model, /v1/models answer or error text, server headers)``; model None if unreachable."""
    from urllib.parse import urlsplit, urlunsplit

    from tokenswarm.load.context import api_prefix
    from tokenswarm.wire.auth import split_userinfo, target_headers

    headers = target_headers(target, base_url)
    base_url = split_userinfo(base_url)[0]
    parts = urlsplit(base_url)
    full = urlunsplit((parts.scheme, parts.netloc, api_prefix(base_url) + "/models", "", ""))
    try:
        req = urllib.request.Request(full, headers=headers)
        context = None
        if full.startswith("https") and not target.verify_tls:
            import ssl

            context = ssl._create_unverified_context()  # explicitly asked for (verify_tls: false)
        with urllib.request.urlopen(req, timeout=target.connect_timeout_s, context=context) as resp:
            body = json.loads(resp.read() or b"{}")
            server_headers = {k.lower(): v for k, v in resp.headers.items() if k.lower() in ("server", "x-version")}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        if target.model != "auto" and isinstance(exc, urllib.error.HTTPError):
            return target.model, f"HTTP {exc.code}", {}  # reachable; no /v1/models
        return None, f"{type(exc).__name__}: {exc}", {}
    if target.model != "auto":
        return target.model, body, server_headers
    data = body.get("data") if isinstance(body, dict) else None
    if not data:
        return None, "no models listed", server_headers
    return data[0].get("id"), body, server_headers


# ---------------------------------------------------------------------------------------------
# per-process context (local and worker)
# ---------------------------------------------------------------------------------------------
def build_worker_context(env: Any, sc: Any, run_id: str, base_url: str, model: str, sink: Any, role: str,
                         index: int) -> RunContext:
    # The heap built here lives as long as the process: no collection walks it on the way (the
    # collector runs again, with the heap frozen out of its view, when quiet_gc is done).
    with paused_gc():
        from tokenswarm.wire.auth import split_userinfo, target_headers
        from tokenswarm.workload.prompts import PromptSource
        from tokenswarm.workload.tokencount import make_token_counter

        counter = make_token_counter(split_userinfo(base_url)[0], model, sc.traffic.tokenizer,
                                     headers=target_headers(sc.target, base_url))  # /tokenize carries the target's auth
        worker_id = make_worker_id(index if role == "worker" else None)
        sources = {}
        for t in sc.traffic.classes:
            if t.weight > 0:
                sources[t.name] = PromptSource(t, counter, seed=sc.traffic.seed * 1000 + index, api=sc.target.api,
                                               prefix_seed=sc.traffic.seed)
        close = getattr(counter, "close", None)
        if close is not None:
            close()  # the prompts are sized: no idle connection to the target's /tokenize for the whole run
        ctx = RunContext(scenario=sc, run_id=run_id, worker_id=worker_id, base_url=base_url, model=model, sink=sink,
                         role=role, worker_index=index, events=env.events, request_event=env.events.request.fire,
                         prompt_sources=sources)
        apply_user_settings(sc, base_url)
        if any(t.kind == "extraction" and t.weight > 0 for t in sc.traffic.classes):
            from tokenswarm.workload import quality

            quality.preload()  # answers are schema-checked: import the validator before the loop runs
        quiet_gc()
    frame_only_stop_log()
    return ctx


class _FrameOnlyInspect:
    """The two functions of :mod:`inspect` that ``locust.runners`` calls, without source context."""

    @staticmethod
    def stack(context: int = 0) -> list[inspect.FrameInfo]:
        return inspect.getouterframes(sys._getframe(1), 0)  # from the caller's frame, as inspect.stack

    @staticmethod
    def getframeinfo(frame: Any, context: int = 0) -> inspect.Traceback:
        return inspect.getframeinfo(frame, 0)


def frame_only_stop_log() -> None:
    """Let Locust's ``Runner.stop`` name its caller without reading any source.

    It logs ``called from FILE:LINE`` (at debug level) through ``inspect.stack()``, whose source
    context makes the first call resolve the real path of every loaded module: 15 ms with
    Locust and tokenswarm loaded, ~50 ms in a run, taken while streams still in flight are
    being read (tokenswarm used to pay it at start instead). Without context it is the same file
    and line in ~0.1 ms. The debugger's ``locust.debug`` is left as it is.
    """
    import locust.runners

    setattr(locust.runners, "inspect", _FrameOnlyInspect)  # noqa: B010  (the module attribute Locust reads, not a type)


def apply_user_settings(sc: Any, base_url: str) -> None:
    """Timeouts, TLS, host and pool sizes of the user classes, from the scenario."""
    from tokenswarm.load.users import CLOSED_LOOP_USERS, OpenLoopUser
    from tokenswarm.wire.auth import split_userinfo

    t = sc.target
    for cls in (*CLOSED_LOOP_USERS, OpenLoopUser):
        cls.host = split_userinfo(base_url)[0]
        cls.connection_timeout = t.connect_timeout_s
        cls.network_timeout = t.total_timeout_s
        cls.insecure = not t.verify_tls
    OpenLoopUser.concurrency = max(16, sc.load.max_in_flight)


def set_class_weights(sc: Any, mode: str) -> None:
    from tokenswarm.load.users import CLOSED_LOOP_USERS, OpenLoopUser

    per_request = getattr(sc.traffic, "task_draw", "per_user") in ("per_request", "stratified")
    for cls in CLOSED_LOOP_USERS:
        w = sum(t.weight for t in sc.traffic.classes if t.kind == cls.kind)
        if cls.kind == "mixed":  # the per-request draw or deal: one class sends every task
            w = 1 if per_request else 0
        elif per_request:
            w = 0
        cls.weight = 0 if mode in ("open", "replay") else w
    OpenLoopUser.weight = 1 if mode in ("open", "replay") else 0


def load_scenario_from_options(opts: Any) -> Any:
    from tokenswarm.workload.scenario import load_scenario, parse_override, resolve_scenario_path

    if not opts.scenario:
        raise SystemExit("tokenswarm: --scenario is required (e.g. --scenario scenarios/mix.yaml)")
    overrides = dict(parse_override(s) for s in opts.tokenswarm_set or [])
    sc = load_scenario(resolve_scenario_path(opts.scenario), overrides or None)
    return sc, overrides


# ---------------------------------------------------------------------------------------------
# event listeners
# ---------------------------------------------------------------------------------------------
