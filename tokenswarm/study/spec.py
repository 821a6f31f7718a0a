"""What a study is: one scenario, two or more arms, rounds -- from a study file or from flags.

A study file (YAML)::

    scenario: spec-baseline          # a scenario name or path (relative to this file)
    baseline: baseline               # default: the first arm
    rounds: 2
    out: studies/spec                # default: studies/<scenario>-<time>
    set: ["load.steps=[1,8]"]        # scenario overrides for every arm
    arms:
      baseline: {command: "tokenswarm sim --port {port} --spec-method none"}
      draft:    {command: "tokenswarm sim --port {port} --spec-method draft"}
      hot:      {host: "http://127.0.0.1:8000", set: ["traffic.sampling.temperature=0.7"]}

Every error is a :class:`StudyError` naming the file (or flag) and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tokenswarm.redact import redact, remember, remember_target, url_secrets
from tokenswarm.workload.scenario import resolve_scenario_path
from tokenswarm.workload.scenario.yamlsafe import MAX_EXPANDED_NODES, YamlTooLarge, load_bounded

_ARM_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_TOP = ("scenario", "baseline", "rounds", "out", "set", "arms", "ready_timeout_s", "warmup_requests",
        "stop_timeout_s")
_ARM = ("command", "host", "set")


#: What ``{host}`` in an override is checked as before the arm's server (and its port) exists.
HOST_PLACEHOLDER_URL = "http://127.0.0.1:1"


def checkable(override: str) -> str:
    """An override as it can be validated before the study starts (``{host}`` is the arm's server)."""
    return override.replace("{host}", HOST_PLACEHOLDER_URL)


class StudyError(ValueError):
    """A bad study file or flag; the message names where and what was expected (exit status 2)."""


@dataclass(frozen=True)
class Arm:
    """One configuration under test: a server command to start, or the URL of a running server."""

    name: str
    command: str | None = None  #: shell command line with {port} / {host} placeholders
    host: str | None = None  #: base URL of a server the user runs
    overrides: tuple[str, ...] = ()  #: scenario overrides (FIELD=VALUE) for this arm only

    def describe(self) -> dict[str, Any]:
        """JSON-able description for the manifest, secrets masked."""
        return {"name": self.name, "command": mask_command(self.command) if self.command else None,
                "host": mask_url(self.host) if self.host else None, "set": list(self.overrides)}


@dataclass(frozen=True)
class Study:
    """A validated study."""

    scenario: str  #: resolved scenario path
    arms: tuple[Arm, ...]
    baseline: str
    rounds: int = 2
    out: str | None = None
    overrides: tuple[str, ...] = ()
    ready_timeout_s: float = 600.0
    warmup_requests: int = 2
    stop_timeout_s: float = 15.0
    source: str = "command line"
    extra: dict[str, Any] = field(default_factory=dict)

    def arm(self, name: str) -> Arm:
        """The arm called ``name``."""
        return next(a for a in self.arms if a.name == name)

    @property
    def candidates(self) -> list[str]:
        """Every arm but the baseline, in the given order."""
        return [a.name for a in self.arms if a.name != self.baseline]


# The value after a secret-named flag; never the next flag (``--token-cache --spec-method x`` keeps
# ``--spec-method``: masking replaces the secret, not the words around it).
_SECRET_FLAG = re.compile(r"(--?[\w-]*(?:key|token|secret|password)[\w-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|(?!-)\S+)",
                          re.IGNORECASE)
_SECRET_ENV = re.compile(r"\b([A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD)[A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+):[^/\s@]+@")
_KEY_VALUE = re.compile(r"\b(?:sk|pk|rk|hf|gsk|xai)[-_][A-Za-z0-9_\-]{8,}")


def mask_command(command: str) -> str:
    """``command`` with secret-looking values replaced by ``***`` (flags, VAR=..., URL passwords, keys),
    and every value the one redaction function knows (the scenario's key, headers, URL user info:
    :func:`remember_study_secrets`) wherever it stands, a positional argument too."""
    out = _SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}***", command)
    out = _SECRET_ENV.sub(lambda m: f"{m.group(1)}=***", out)
    out = _URL_PASSWORD.sub(r"\1:***@", out)
    return redact(_KEY_VALUE.sub("***", out))  # and what the one redaction function knows to be secret


def remember_study_secrets(study: Study, scenarios: list[Any]) -> None:
    """Teach the one redaction function every secret the study names: each arm's scenario target
    (the value of ``api_key_env``, secret headers, URL user info) and the arms' host URLs, so
    that commands, ``study.json``, the report, prints and server logs mask them wherever they
    appear."""
    for sc in scenarios:
        remember_target(sc.target)
    for arm in study.arms:
        remember(*url_secrets(arm.host))


def mask_url(url: str) -> str:
    """``url`` without the password of its user info."""
    return redact(_URL_PASSWORD.sub(r"\1:***@", url))


def parse_arm_flag(text: str) -> Arm:
    """``NAME=COMMAND`` or ``NAME=http(s)://...`` from ``--arm``."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise StudyError(f"--arm {text!r}: expected NAME=COMMAND or NAME=http://HOST:PORT")
    return _make_arm(name, value, None, f"--arm {name}")


def _make_arm(name: str, command_or_host: str | None, host: str | None, where: str,
              overrides: tuple[str, ...] = ()) -> Arm:
    if not _ARM_NAME.match(name):
        raise StudyError(f"{where}: arm name {name!r}: expected letters, digits, '_' or '-'")
    if host is None and command_or_host and re.match(r"^https?://\S+$", command_or_host):
        host, command_or_host = command_or_host, None
    if host is not None and not re.match(r"^https?://[^/\s]+", host):
        raise StudyError(f"{where}: host: expected an http:// or https:// URL, got {mask_url(host)!r}")
    if command_or_host is not None and "{port}" not in command_or_host and "{host}" not in command_or_host:
        raise StudyError(f"{where}: command: expected a {{port}} (or {{host}}) placeholder for the port that "
                         f"tokenswarm chooses, got {mask_command(command_or_host)!r}")
    return Arm(name, command_or_host, host, overrides)


def _check_arms(arms: list[Arm], baseline: str | None, where: str) -> str:
    names = [a.name for a in arms]
    if len(arms) < 2:
        raise StudyError(f"{where}: arms: expected at least two arms (a baseline and a candidate), got {len(arms)}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise StudyError(f"{where}: arms: names must be unique, {', '.join(dup)} repeated")
    base = baseline or names[0]
    if base not in names:
        raise StudyError(f"{where}: baseline: {base!r} is not an arm (arms: {', '.join(names)})")
    return base


def _resolve_scenario(name: str, base_dir: Path | None, where: str) -> str:
    if base_dir is not None and (base_dir / name).is_file():
        return str((base_dir / name).resolve())
    path = resolve_scenario_path(name)
    if not Path(path).is_file():
        raise StudyError(f"{where}: scenario: no scenario file {name!r} (a path, or a name under scenarios/)")
    return str(Path(path).resolve())


def is_study_file(path: str) -> bool:
    """True when ``path`` is a YAML mapping with an ``arms`` section (else it is a scenario)."""
    p = Path(path)
    if not p.is_file() or p.suffix not in (".yaml", ".yml"):
        return False
    try:
        data = load_bounded(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, YamlTooLarge, OSError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "arms" in data


def _num(data: dict[str, Any], key: str, default: float, where: str, minimum: float, integer: bool = False) -> Any:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and int(v) != v) or v < minimum:
        kind = "an integer" if integer else "a number"
        raise StudyError(f"{where}: {key}: expected {kind} >= {minimum:g}, got {v!r}")
    return int(v) if integer else float(v)


def _str_list(v: Any, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) and "=" in x for x in v):
        raise StudyError(f"{where}: expected a list of FIELD=VALUE strings, got {v!r}")
    return tuple(v)


def load_study_file(path: str) -> Study:
    """Read and validate a study file."""
    p = Path(path)
    try:
        data = load_bounded(p.read_text(encoding="utf-8"))
    except YamlTooLarge as e:
        raise StudyError(f"{path}: {e} (at most {MAX_EXPANDED_NODES} values once aliases are expanded)") from None
    except OSError as e:
        raise StudyError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise StudyError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path}: expected a mapping with scenario and arms")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise StudyError(f"{path}: {unknown[0]}: unknown field (expected one of {', '.join(_TOP)})")
    if not isinstance(data.get("scenario"), str):
        raise StudyError(f"{path}: scenario: expected a scenario name or path")
    raw_arms = data.get("arms")
    if not isinstance(raw_arms, dict):
        raise StudyError(f"{path}: arms: expected a mapping of arm name -> {{command: ...}} or {{host: ...}}")
    arms = []
    for name, cfg in raw_arms.items():
        where = f"{path}: arms.{name}"
        if not isinstance(cfg, dict):
            raise StudyError(f"{where}: expected a mapping with command or host")
        bad = sorted(set(cfg) - set(_ARM))
        if bad:
            raise StudyError(f"{where}.{bad[0]}: unknown field (expected command, host or set)")
        if ("command" in cfg) == ("host" in cfg):
            raise StudyError(f"{where}: expected exactly one of command and host")
        for k in ("command", "host"):
            if k in cfg and not (isinstance(cfg[k], str) and cfg[k].strip()):
                raise StudyError(f"{where}.{k}: expected a non-empty string")
        arms.append(_make_arm(str(name), cfg.get("command"), cfg.get("host"), where,
                              _str_list(cfg.get("set"), f"{where}.set")))
    baseline = data.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise StudyError(f"{path}: baseline: expected an arm name")
    base = _check_arms(arms, baseline, path)
    out = data.get("out")
    if out is not None and not isinstance(out, str):
        raise StudyError(f"{path}: out: expected a directory path")
    return Study(
        scenario=_resolve_scenario(data["scenario"], p.parent, path), arms=tuple(arms), baseline=base,
        rounds=_num(data, "rounds", 2, path, 1, integer=True), out=out,
        overrides=_str_list(data.get("set"), f"{path}: set"),
        ready_timeout_s=_num(data, "ready_timeout_s", 600.0, path, 0.1),
        warmup_requests=_num(data, "warmup_requests", 2, path, 0, integer=True),
        stop_timeout_s=_num(data, "stop_timeout_s", 15.0, path, 0.1), source=str(p),
    )


def study_from_args(args: Any) -> Study:
    """A study from the parsed ``tokenswarm study`` flags (a study file first, flags override)."""
    if is_study_file(args.scenario):
        study = load_study_file(args.scenario)
        arms = list(study.arms)
        if args.arm:
            arms = [parse_arm_flag(a) for a in args.arm]
        base = _check_arms(arms, args.baseline or (study.baseline if not args.arm else None), "--arm")
        return Study(scenario=study.scenario, arms=tuple(arms), baseline=base,
                     rounds=args.rounds if args.rounds is not None else study.rounds,
                     out=args.out or study.out, overrides=study.overrides + tuple(args.overrides),
                     ready_timeout_s=args.ready_timeout if args.ready_timeout is not None else study.ready_timeout_s,
                     warmup_requests=study.warmup_requests, stop_timeout_s=study.stop_timeout_s, source=study.source)
    arms = [parse_arm_flag(a) for a in args.arm]
    base = _check_arms(arms, args.baseline, "--arm")
    rounds = args.rounds if args.rounds is not None else 2
    if rounds < 1:
        raise StudyError(f"--rounds: expected an integer >= 1, got {rounds}")
    return Study(scenario=_resolve_scenario(args.scenario, None, "tokenswarm study"), arms=tuple(arms),
                 baseline=base, rounds=rounds, out=args.out, overrides=tuple(args.overrides),
                 ready_timeout_s=args.ready_timeout if args.ready_timeout is not None else 600.0)
