"""The run manifest (``manifest.json``) as frozen dataclasses shared by its writer and its readers.

The controller writes it (through :class:`tokenswarm.collect.manifest.ManifestFile`) and the
analysis reads it (:func:`analysis.loader.read_manifest`); both go through
:meth:`RunManifest.to_json` / :meth:`RunManifest.from_json` so the two sides cannot disagree on
a field's name, type or default.

Reading is deliberate about what it does not know:

* a key this module does not name is kept in :attr:`RunManifest.extra` and written back
  unchanged, so a newer writer's additions survive a read-modify-write by an older tool;
* a key that older manifests lack gets its default here, in :func:`RunManifest.from_json`
  and the dataclass defaults, and nowhere else;
* a key of the wrong type is an error naming the file and the field
  (``runs/x/manifest.json: steps[2].target: expected a number, got 'ten'``).

The steps define every per-step number of the analysis: a step's steady window is
``steady_at .. ended_at`` (epoch seconds), its requests are the records with ``step == index``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from tokenswarm.record import FORMAT_VERSION, READABLE_FORMAT_VERSIONS

#: The kinds of load step: a number of concurrent users, or an arrival rate (requests/s).
STEP_KINDS = ("concurrency", "rate")


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file (when known) and the field."""


#: Fields of a scenario class renamed in format version 3: old name -> new name. The requested
#: lengths (sent as ``max_tokens``) were called ``output_tokens``, the record's name for the
#: length the server counted. Manifests of versions 1 and 2 are read under the new name; the
#: scenario parser still takes the old one, with a warning.
V2_RENAMED_CLASS_FIELDS: dict[str, str] = {"output_tokens": "max_tokens"}


def upgrade_v2_scenario(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1/2 scenario echo with its classes' renamed fields under today's names (a copy)."""
    out = dict(scenario)
    traffic = out.get("traffic")
    if not isinstance(traffic, Mapping) or not isinstance(traffic.get("classes"), Mapping):
        return out
    classes: Mapping[str, Any] = traffic["classes"]
    renamed = {}
    for name, cfg in classes.items():
        if isinstance(cfg, Mapping):
            cfg = {V2_RENAMED_CLASS_FIELDS.get(k, k): v for k, v in cfg.items()}
        renamed[name] = cfg
    out["traffic"] = {**traffic, "classes": renamed}
    return out


def _where(source: str | None, path: str) -> str:
    return f"{source}: {path}" if source else path


def _num(value: Any, where: str, *, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ManifestError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{where}: expected an integer, got {value!r}")
    return value


def _str(value: Any, where: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ManifestError(f"{where}: expected a string, got {value!r}")
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected an object, got {type(value).__name__}")
    return dict(value)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ManifestError(f"{where}: expected a list, got {type(value).__name__}")
    return list(value)


@dataclass(frozen=True)
class LoadStep:
    """One step of the load plan and when it ran (epoch seconds; ``None`` = not reached)."""

    index: int
    name: str
    kind: str  # one of STEP_KINDS
    target: float  # users (concurrency) or requests/s (rate)
    started_at: float | None = None  # warm-up began
    steady_at: float | None = None  # measurement window began
    ended_at: float | None = None  # measurement window ended
    #: the run stopped while this step ran (interrupted, or a guard): it is shorter than planned
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "kind": self.kind, "target": self.target,
                "started_at": self.started_at, "steady_at": self.steady_at, "ended_at": self.ended_at,
                "partial": self.partial}

    @classmethod
    def from_json(cls, data: Any, where: str = "step", *, position: int = 0) -> LoadStep:
        if not isinstance(data, Mapping):
            raise ManifestError(f"{where}: expected an object, got {type(data).__name__}")
        index = _int(data.get("index", position), f"{where}.index")
        kind = _str(data.get("kind"), f"{where}.kind", optional=False)
        if kind not in STEP_KINDS:
            raise ManifestError(f"{where}.kind: expected one of {', '.join(STEP_KINDS)}, got {kind!r}")
        target = _num(data.get("target"), f"{where}.target", optional=False)
        assert target is not None
        name = data.get("name")
        partial = data.get("partial", False)
        if not isinstance(partial, bool):
            raise ManifestError(f"{where}.partial: expected true or false, got {partial!r}")
        return cls(index=index, name=str(index) if name is None else str(name), kind=kind, target=target,
                   started_at=_num(data.get("started_at"), f"{where}.started_at"),
                   steady_at=_num(data.get("steady_at"), f"{where}.steady_at"),
                   ended_at=_num(data.get("ended_at"), f"{where}.ended_at"), partial=partial)


@dataclass(frozen=True)
class RunTarget:
    """The server the run loaded, as the preflight saw it."""

    base_url: str | None = None
    api: str | None = None
    model: str | None = None
    models_response: Any = None  # the server's /v1/models answer, verbatim
    server_headers: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "api": self.api, "model": self.model,
                "models_response": self.models_response, "server_headers": dict(self.server_headers)}

    @classmethod
    def from_json(cls, data: Any, where: str = "target") -> RunTarget:
        d = _obj(data, where)
        return cls(base_url=_str(d.get("base_url"), f"{where}.base_url"), api=_str(d.get("api"), f"{where}.api"),
                   model=_str(d.get("model"), f"{where}.model"), models_response=d.get("models_response"),
                   server_headers=_obj(d.get("server_headers"), f"{where}.server_headers"))


@dataclass(frozen=True)
class RecordsStore:
    """How the records are stored: ``jsonl`` (the default of manifests that do not say) or ``parquet``."""

    format: str = "jsonl"
    format_version: int | None = None  # the store's own version (parquet); the record's is the manifest's

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "format_version": self.format_version}

    @classmethod
    def from_json(cls, data: Any, where: str = "records_store") -> RecordsStore:
        d = _obj(data, where)
        fmt = _str(d.get("format"), f"{where}.format") or "jsonl"
        version = d.get("format_version")
        return cls(format=fmt, format_version=None if version is None else _int(version, f"{where}.format_version"))


@dataclass(frozen=True)
class Totals:
    """Request accounting over all workers: started, recorded, and lost.

    ``records_lost`` = ``records_missing_seqs`` (sequence gaps: batches that never arrived) +
    ``in_flight_lost`` (requests in flight on a worker that died). A local run loses none.
    """

    requests_started: int = 0
    records_received: int = 0
    records_lost: int = 0
    records_missing_seqs: int = 0
    in_flight_lost: int = 0

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in _TOTALS_KEYS}

    @classmethod
    def from_json(cls, data: Any, where: str = "totals") -> Totals:
        d = _obj(data, where)
        return cls(**{k: _int(d.get(k, 0), f"{where}.{k}") for k in _TOTALS_KEYS})


_TOTALS_KEYS = ("requests_started", "records_received", "records_lost", "records_missing_seqs", "in_flight_lost")


#: Keys of manifest.json this module reads into fields (everything else goes to ``extra``).
_KNOWN = ("format_version", "run_id", "tokenswarm_version", "locust_version", "python_version", "host",
          "command", "scenario_name", "scenario", "target", "records_store", "load_mode", "started_at",
          "ended_at", "stop_reason", "steps", "workers", "totals", "generator_health", "warnings", "complete",
          "workers_refused")


@dataclass(frozen=True)
class RunManifest:
    """``manifest.json``: what ran, against what, when, on which workers, and what was lost.

    ``scenario`` is the resolved scenario as written (its schema is the scenario model's, see
    :mod:`tokenswarm.workload.scenario`); ``workers`` are the collector's per-worker accounts and
    ``generator_health`` the health summary, kept as JSON objects because their producers own
    their shape. ``complete`` is true once the run ended and every record was flushed, unless it
    was interrupted (Ctrl-C, SIGTERM, the web UI's stop); ``stop_reason`` says why it ended
    (:class:`tokenswarm.orchestrate.ending.StopReason`'s values; ``None`` while it runs).
    """

    run_id: str
    format_version: int = FORMAT_VERSION
    tokenswarm_version: str | None = None
    locust_version: str | None = None
    python_version: str | None = None
    host: str | None = None
    command: tuple[str, ...] = ()
    scenario_name: str | None = None
    scenario: Mapping[str, Any] | None = None
    target: RunTarget = field(default_factory=RunTarget)
    records_store: RecordsStore = field(default_factory=RecordsStore)
    load_mode: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    stop_reason: str | None = None
    steps: tuple[LoadStep, ...] = ()
    workers: tuple[Mapping[str, Any], ...] = ()
    #: worker connections the master did not admit (no or wrong worker token, forged sender):
    #: ``{"worker", "reason", "messages_dropped", "record_batches_dropped"}``; absent = none
    workers_refused: tuple[Mapping[str, Any], ...] = ()
    totals: Totals = field(default_factory=Totals)
    generator_health: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    complete: bool = False
    #: keys this version does not know, preserved verbatim by a read-modify-write
    extra: Mapping[str, Any] = field(default_factory=dict)

    # -- derived --------------------------------------------------------------------------------
    @property
    def scenario_dict(self) -> Mapping[str, Any]:
        """The resolved scenario, or an empty mapping for a manifest without one."""
        return self.scenario or {}

    def with_warning(self, text: str) -> RunManifest:
        """This manifest with ``text`` added to its warnings (once)."""
        return self if text in self.warnings else replace(self, warnings=(*self.warnings, text))

    # -- JSON -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON object written to ``manifest.json`` (extra keys first, known keys win)."""
        return {
            **self.extra,
            "format_version": self.format_version,
            "run_id": self.run_id,
            "tokenswarm_version": self.tokenswarm_version,
            "locust_version": self.locust_version,
            "python_version": self.python_version,
            "host": self.host,
            "command": list(self.command),
            "scenario_name": self.scenario_name,
            "scenario": None if self.scenario is None else dict(self.scenario),
            "target": self.target.to_json(),
            "records_store": self.records_store.to_json(),
            "load_mode": self.load_mode,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "stop_reason": self.stop_reason,
            "steps": [s.to_json() for s in self.steps],
            "workers": [dict(w) for w in self.workers],
            "totals": self.totals.to_json(),
            "generator_health": dict(self.generator_health),
            "warnings": list(self.warnings),
            "complete": self.complete,
            **({"workers_refused": [dict(w) for w in self.workers_refused]} if self.workers_refused else {}),
        }

    @classmethod
    def from_json(cls, data: Any, source: str | None = None) -> RunManifest:
        """Validate a decoded ``manifest.json``; ``source`` (the file) prefixes every error.

        Raises :class:`ManifestError` for a wrong type or an unknown ``format_version``.
        """
        def w(path: str) -> str:
            return _where(source, path)

        if not isinstance(data, Mapping):
            raise ManifestError(f"{source or 'manifest'}: expected a JSON object, got {type(data).__name__}")
        version = data.get("format_version")
        if version not in READABLE_FORMAT_VERSIONS:
            raise ManifestError(f"{source or 'manifest'}: unknown format_version {version!r}; "
                                f"this tokenswarm reads format_version "
                                f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
        run_id = _str(data.get("run_id"), w("run_id"), optional=False)
        assert run_id is not None
        scenario = data.get("scenario")
        if scenario is not None and not isinstance(scenario, Mapping):
            raise ManifestError(f"{w('scenario')}: expected an object, got {type(scenario).__name__}")
        steps = tuple(LoadStep.from_json(s, w(f"steps[{i}]"), position=i)
                      for i, s in enumerate(_list(data.get("steps"), w("steps"))))
        workers = _list(data.get("workers"), w("workers"))
        for i, wk in enumerate(workers):
            if not isinstance(wk, Mapping):
                raise ManifestError(f"{w(f'workers[{i}]')}: expected an object, got {type(wk).__name__}")
        refused = _list(data.get("workers_refused"), w("workers_refused"))
        for i, wk in enumerate(refused):
            if not isinstance(wk, Mapping):
                raise ManifestError(f"{w(f'workers_refused[{i}]')}: expected an object, got {type(wk).__name__}")
        warnings = _list(data.get("warnings"), w("warnings"))
        complete = data.get("complete", False)
        if not isinstance(complete, bool):
            raise ManifestError(f"{w('complete')}: expected true or false, got {complete!r}")
        return cls(
            run_id=run_id,
            format_version=version,
            tokenswarm_version=_str(data.get("tokenswarm_version"), w("tokenswarm_version")),
            locust_version=_str(data.get("locust_version"), w("locust_version")),
            python_version=_str(data.get("python_version"), w("python_version")),
            host=_str(data.get("host"), w("host")),
            command=tuple(str(c) for c in _list(data.get("command"), w("command"))),
            scenario_name=_str(data.get("scenario_name"), w("scenario_name")),
            scenario=None if scenario is None else (dict(scenario) if version >= 3 else upgrade_v2_scenario(scenario)),
            target=RunTarget.from_json(data.get("target"), w("target")),
            records_store=RecordsStore.from_json(data.get("records_store"), w("records_store")),
            load_mode=_str(data.get("load_mode"), w("load_mode")),
            started_at=_num(data.get("started_at"), w("started_at")),
            ended_at=_num(data.get("ended_at"), w("ended_at")),
            stop_reason=_str(data.get("stop_reason"), w("stop_reason")),
            steps=steps,
            workers=tuple(dict(wk) for wk in workers),
            workers_refused=tuple(dict(wk) for wk in refused),
            totals=Totals.from_json(data.get("totals"), w("totals")),
            generator_health=_obj(data.get("generator_health"), w("generator_health")),
            warnings=tuple(str(x) for x in warnings),
            complete=complete,
            extra={k: v for k, v in data.items() if k not in _KNOWN},
        )


def read_run_manifest(run_dir: str | os.PathLike[str]) -> RunManifest:
    """``run_dir/manifest.json``, validated; :class:`ManifestError` names the file and field.

    The one reader of the file, for the analysis (:func:`tokenswarm.analysis.loader.read_manifest`)
    and the generator's own end-of-run verdict (which imports no analysis module for it).
    """
    run_dir = Path(run_dir)
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise ManifestError(f"{run_dir}: not a run directory (does not exist or is not a directory)")
    if not path.is_file():
        raise ManifestError(f"{path}: missing (every run directory has a manifest.json)")
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ManifestError(f"{path}: truncated or not valid JSON ({exc})") from None
    return RunManifest.from_json(manifest, str(path))
