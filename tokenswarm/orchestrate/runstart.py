"""What a run needs before its first request: a target that answers, the run's files, its context.

The controller's ``start`` calls these in order. A run that cannot start (no target, no
server, a prompt longer than the model's context, a search without SLOs) raises
:class:`StartRefused` with the exit status it ends the process with; nothing is opened then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from tokenswarm.collect.manifest import default_run_dir
from tokenswarm.collect.relay import FileSink
from tokenswarm.load.context import RunContext
from tokenswarm.load.preflight import Preflight, PreflightError, PromptTooLongError, check_prompt_lengths, preflight
from tokenswarm.load.setup import build_worker_context, sc_data
from tokenswarm.manifest import RunTarget
from tokenswarm.orchestrate.recording import RunRecording
from tokenswarm.orchestrate.verdict import EXIT_BAD_CONFIG, EXIT_RUN_BROKE


class StartRefused(Exception):
    """The run cannot start; ``exit_code`` is the process's exit status."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def checked_target(scenario: Any, slos: Mapping[str, Any], base_url: str, pf: Preflight | None,
                   wait_s: float) -> Preflight:
    """The target's preflight answer (``pf`` when already probed), every prompt fitting its context."""
    if scenario.load.search is not None and not slos:
        raise StartRefused("load.mode search needs SLOs to search under (a slo section or --slo NAME=VALUE)",
                           EXIT_BAD_CONFIG)
    if not base_url:
        raise StartRefused("no target: give --host or target.base_url in the scenario", EXIT_BAD_CONFIG)
    try:
        if pf is None:
            pf = preflight(base_url, scenario.target, wait_s, models=scenario.model_names())
    except PreflightError as exc:
        raise StartRefused(str(exc), EXIT_RUN_BROKE) from exc
    try:
        check_prompt_lengths(scenario, pf)
    except PromptTooLongError as exc:
        raise StartRefused(str(exc), EXIT_BAD_CONFIG) from exc
    return pf


def open_recording(scenario: Any, opts: Any, run_id: str, run_number: int, base_url: str, pf: Preflight, *,
                   load_mode: str, is_master: bool) -> RunRecording:
    """The run's directory and files: ``--out`` (numbered from a process's second run on) or a new one."""
    out = Path(opts.out) if opts.out else default_run_dir(run_id)
    if opts.out and run_number > 1:
        out = Path(f"{opts.out}-{run_number}")
    return RunRecording.open(
        out, run_id, scenario, load_mode=load_mode,
        target=RunTarget(base_url=base_url, api=scenario.target.api, model=pf.model, models_response=pf.models,
                         server_headers=pf.server_headers or {}),
        records_format=getattr(opts, "records_format", "auto") or "auto", records_gzip=bool(opts.records_gzip),
        records_rotate_mb=float(opts.records_rotate_mb or 0), is_master=is_master)


def make_context(env: Any, scenario: Any, overrides: dict[str, Any] | None, rec: RunRecording, run_id: str,
                 base_url: str, model: str, *, is_master: bool) -> RunContext:
    """The run context (a master's keeps the step; a local one emits the records), after
    handing workers what they need of the run through the spawn message's parsed options."""
    opts = env.parsed_options
    opts.tokenswarm_scenario_data = json.dumps(sc_data(scenario, overrides))
    opts.tokenswarm_run_id = run_id
    opts.tokenswarm_base_url = base_url
    opts.tokenswarm_model = model
    if is_master:
        sink = FileSink(rec.writer)  # unused for records on the master, keeps the API uniform
        return RunContext(scenario=scenario, run_id=run_id, worker_id="master", base_url=base_url, model=model,
                          sink=sink, role="master", events=env.events)
    return build_worker_context(env, scenario, run_id, base_url, model, FileSink(rec.writer), "local", 0)
