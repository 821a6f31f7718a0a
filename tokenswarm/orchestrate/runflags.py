"""The run flags that shape the load plan, checked before anything is sent.

``--steps``, ``--step-duration`` and ``--warmup`` override the scenario's ``load`` section;
``-u/--users`` replaces the plan by a fixed concurrency, ``-t/--run-time`` caps it and
``--max-run-time`` is the hard stop. A bad value is an error naming the flag (exit status 2
before the first request), never a log line followed by another plan. ``tokenswarm run``
(including ``--dry-run``, so the plan it prints is the plan that runs) and the Locust plugin
(``locust -f locustfiles/llm.py``) both check them here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tokenswarm.workload.scenario import ScenarioError, load_scenario

#: flag -> the scenario field it overrides
PLAN_FLAG_FIELDS = {"--steps": "load.steps", "--step-duration": "load.step_duration_s", "--warmup": "load.warmup_s"}


class RunFlagError(ValueError):
    """A run flag with a value that cannot run; the message names the flag and the value."""


@dataclass(frozen=True)
class RunFlags:
    """The plan-shaping flags as given (strings from a command line, or Locust's parsed values)."""

    steps: str | None = None
    step_duration: str | None = None
    warmup: str | None = None
    users: Any = None  # -u: an int from Locust's parser, a string from tokenswarm run's passthrough
    run_time: Any = None  # -t: seconds from Locust's parser, a time span string from the passthrough
    max_run_time: float | None = None

    @classmethod
    def from_options(cls, opts: Any) -> RunFlags:
        """From Locust's parsed options (the plugin's dests)."""
        return cls(steps=getattr(opts, "tokenswarm_steps", None), step_duration=getattr(opts, "tokenswarm_step_duration", None),
                   warmup=getattr(opts, "tokenswarm_warmup", None), users=getattr(opts, "num_users", None),
                   run_time=getattr(opts, "run_time", None), max_run_time=getattr(opts, "tokenswarm_max_run_time", None))

    def plan_overrides(self) -> dict[str, Any]:
        """The scenario overrides of ``--steps``, ``--step-duration`` and ``--warmup`` (empty = the scenario's)."""
        out: dict[str, Any] = {}
        for flag, raw in (("--steps", self.steps), ("--step-duration", self.step_duration), ("--warmup", self.warmup)):
            text = str(raw or "").strip()
            if not text:
                continue
            try:
                if flag == "--steps":
                    items = [x.strip() for x in text.replace(";", ",").split(",") if x.strip()]
                    out[PLAN_FLAG_FIELDS[flag]] = [_number(x) for x in items]
                else:
                    out[PLAN_FLAG_FIELDS[flag]] = _number(text)
            except ValueError:
                what = "comma-separated numbers, e.g. 1,4,16" if flag == "--steps" else "a number of seconds"
                raise RunFlagError(f"{flag} {text!r}: expected {what}") from None
        return out

    def users_count(self) -> int | None:
        """``-u`` as a number of users (None: not given)."""
        if self.users is None:
            return None
        try:
            users = int(str(self.users).strip())
        except ValueError:
            raise RunFlagError(f"-u/--users {self.users!r}: expected a whole number of users >= 1") from None
        if users < 1:
            raise RunFlagError(f"-u/--users {users}: expected a whole number of users >= 1")
        return users

    def run_time_s(self) -> float | None:
        """``-t`` in seconds (None: not given)."""
        if self.run_time is None or self.run_time == "":
            return None
        if isinstance(self.run_time, (int, float)) and not isinstance(self.run_time, bool):
            seconds = float(self.run_time)
        else:
            try:
                seconds = float(timespan_s(str(self.run_time).strip()))
            except ValueError:
                raise RunFlagError(f"-t/--run-time {self.run_time!r}: expected a duration such as 90, 90s, "
                                   "5m or 1h30m") from None
        if seconds <= 0:
            raise RunFlagError(f"-t/--run-time {self.run_time!r}: expected a duration > 0")
        return seconds

    def check(self, scenario_path: Any, overrides: dict[str, Any] | None, parsed: Any = None) -> Any:
        """The scenario as these flags make it run; :class:`RunFlagError` names the first bad flag.

        ``parsed``: the scenario already loaded from ``scenario_path`` with ``overrides``, returned
        as it is when no flag changes the plan (a second parse cost ~10 ms of start-up).
        """
        self.users_count()
        self.run_time_s()
        if self.max_run_time is not None and float(self.max_run_time) < 0:
            raise RunFlagError(f"--max-run-time {self.max_run_time:g}: expected seconds >= 0 (0 = the default guard)")
        plan = self.plan_overrides()
        if not plan and parsed is not None:
            return parsed
        try:
            return load_scenario(scenario_path, {**(overrides or {}), **plan} or None)
        except ScenarioError as exc:
            text = str(exc)
            for flag, fieldname in PLAN_FLAG_FIELDS.items():
                if fieldname in plan and fieldname in text:
                    given = {"--steps": self.steps, "--step-duration": self.step_duration, "--warmup": self.warmup}[flag]
                    raise RunFlagError(f"{flag} {str(given).strip()}: {text}") from None
            raise


_TIMESPAN = re.compile(r"((?P<hours>\d+?)h)?((?P<minutes>\d+?)m)?((?P<seconds>\d+?)s)?")


def timespan_s(text: str) -> int:
    """Seconds of a ``-t`` value as Locust reads it (``20``, ``20s``, ``3m``, ``1h20m``, ``3h30m10s``;
    ``ValueError`` otherwise): its ``locust.util.timespan`` rules, without importing Locust, whose
    import patches the process (``tokenswarm run`` checks ``-t`` before it hands over to Locust)."""
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = _TIMESPAN.fullmatch(text)
    if parts is None or not any(parts.groupdict().values()):
        raise ValueError(f"invalid time span {text!r}: expected e.g. 20, 20s, 3m, 2h, 1h20m, 3h30m10s")
    return sum(int(v or 0) * unit for v, unit in zip(parts.group("hours", "minutes", "seconds"), (3600, 60, 1)))


def _number(text: str) -> int | float:
    """``"8"`` -> 8, ``"0.5"`` -> 0.5 (as YAML would read them, so errors quote the value as given)."""
    try:
        return int(text)
    except ValueError:
        return float(text)
