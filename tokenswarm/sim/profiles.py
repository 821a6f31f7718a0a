"""Engine cost profiles: YAML files that calibrate the simulated GPU.

A profile is looked up by name in ``tokenswarm/sim/profiles/NAME.yaml`` or read from a path.
Every field is checked; errors name the file and the field (:class:`ProfileError`).
See the README for the meaning of each field and the step-time formula.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_PROFILE = "27b-1gpu"


class ProfileError(ValueError):
    """An invalid profile; the message names the file and the dotted field."""


@dataclass(frozen=True)
class DraftCost:
    """Cost of the draft model: one draft pass per drafted position, batched over sequences."""

    pass_s: float = 0.002  #: fixed cost of one batched draft forward pass
    flops_per_token_s: float = 0.0  #: extra per sequence in the pass


@dataclass(frozen=True)
class NgramCost:
    """Cost of n-gram (prompt lookup) drafting, CPU side."""

    lookup_s_per_seq: float = 2e-5
    min_n: int = 2  #: shortest suffix n-gram looked up in the prompt
    max_n: int = 3  #: longest suffix n-gram looked up in the prompt


@dataclass(frozen=True)
class Profile:
    """A calibrated engine model. Times in seconds, sizes in tokens."""

    name: str
    model_name: str = "sim-model"
    batching: str = "continuous"  #: "continuous" (vLLM-like shared steps) or "independent"
    max_model_len: int = 32768
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int = 120_000
    overhead_s: float = 0.0015
    weights_read_s: float = 0.023
    kv_read_s_per_token: float = 1e-7
    flops_per_token_s: float = 1e-4
    prefill_tokens_per_s: float = 6000.0
    natural_output_tokens: tuple[int, int] = (64, 512)
    #: Independent batching only: tokens decoded per step (without speculation). Each token
    #: still leaves as its own SSE event, all of a step's events in one socket write -- a
    #: cheap way to serve many events/s (the generator benchmarks' ``bench-burst``).
    tokens_per_step: int = 1
    draft: DraftCost = DraftCost()
    ngram: NgramCost = NgramCost()
    source: str = "<builtin>"


def available_profiles() -> list[str]:
    """Names of the profiles shipped with tokenswarm."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str) -> Path:
    """A shipped profile name or a YAML path -> the file to read."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    shipped = PROFILE_DIR / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    raise ProfileError(
        f"unknown profile {name_or_path!r}: not a file and not one of {', '.join(available_profiles())}"
    )


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Load and validate a profile; raises :class:`ProfileError`."""
    path = resolve_profile_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"profile file {path}: cannot read: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ProfileError(f"profile file {path}: not valid YAML: {e}") from None
    return profile_from_dict(data, str(path))


_POS_FLOAT = ("overhead_s", "weights_read_s", "kv_read_s_per_token", "flops_per_token_s")
_POS_INT = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens", "tokens_per_step")


def profile_from_dict(data: Any, where: str) -> Profile:
    """Validate a decoded YAML mapping into a :class:`Profile`."""

    def err(field: str, msg: str) -> ProfileError:
        return ProfileError(f"profile file {where}: field '{field}': {msg}")

    if not isinstance(data, dict):
        raise ProfileError(f"profile file {where}: expected a mapping of fields, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(Profile)} - {"source"}
    for key in data:
        if key not in known:
            raise err(str(key), f"unknown field (known: {', '.join(sorted(known))})")
    if "name" not in data:
        raise err("name", "missing (a short profile name is required)")
    kw: dict[str, Any] = {"source": where}
    for key, value in data.items():
        if key in ("name", "model_name"):
            if not isinstance(value, str) or not value:
                raise err(key, f"expected a non-empty string, got {value!r}")
            kw[key] = value
        elif key == "batching":
            if value not in ("continuous", "independent"):
                raise err(key, f"expected 'continuous' or 'independent', got {value!r}")
            kw[key] = value
        elif key in _POS_FLOAT:
            kw[key] = _number(value, err, key, min_value=0.0)
        elif key == "prefill_tokens_per_s":
            kw[key] = _number(value, err, key, min_value=1e-9)
        elif key in _POS_INT:
            kw[key] = _integer(value, err, key, min_value=1)
        elif key == "natural_output_tokens":
            if not (isinstance(value, list) and len(value) == 2):
                raise err(key, f"expected [min, max], got {value!r}")
            lo = _integer(value[0], err, key + "[0]", 1)
            hi = _integer(value[1], err, key + "[1]", lo)
            kw[key] = (lo, hi)
        elif key == "draft":
            kw[key] = _sub(DraftCost, value, err, key)
        elif key == "ngram":
            kw[key] = _sub(NgramCost, value, err, key)
    prof = Profile(**kw)
    if prof.tokens_per_step > 1 and prof.batching != "independent":
        raise err("tokens_per_step", "only meaningful with 'batching: independent'")
    if prof.kv_capacity_tokens < prof.max_model_len:
        raise err("kv_capacity_tokens", f"must be >= max_model_len ({prof.max_model_len}) so any request fits")
    if prof.max_num_batched_tokens < 16:
        raise err("max_num_batched_tokens", "must be >= 16")
    if prof.ngram.min_n > prof.ngram.max_n:
        raise err("ngram.min_n", "must be <= ngram.max_n")
    return prof


#: Builds the error for a field: ``err(field, message)``.
_Err = Callable[[str, str], "ProfileError"]
_T = TypeVar("_T")


def _number(value: Any, err: _Err, field: str, min_value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = ""
        if isinstance(value, str) and "e" in value.lower():
            hint = " (YAML needs a signed exponent, e.g. 1.0e+12)"
        raise err(field, f"expected a number, got {value!r}{hint}")
    if value < min_value:
        raise err(field, f"must be >= {min_value}, got {value!r}")
    return float(value)


def _integer(value: Any, err: _Err, field: str, min_value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise err(field, f"expected an integer, got {value!r}")
    if value < min_value:
        raise err(field, f"must be >= {min_value}, got {value!r}")
    return value


def _sub(cls: type[_T], value: Any, err: _Err, field: str) -> _T:
    if not isinstance(value, dict):
        raise err(field, f"expected a mapping, got {value!r}")
    names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # cls is a dataclass
    kw: dict[str, float] = {}
    for k, v in value.items():
        if k not in names:
            raise err(f"{field}.{k}", f"unknown field (known: {', '.join(sorted(names))})")
        if names[k].type == "int":
            kw[k] = _integer(v, err, f"{field}.{k}", 1)
        else:
            kw[k] = _number(v, err, f"{field}.{k}", 0.0)
    return cls(**kw)
