"""The ``traffic`` section: the mix of request classes and what each class sends.

:func:`_parse_traffic` reads the seed, the tokenizer, the shared sampling and extra_body, then
each class with :func:`_parse_task`: its kind (which decides its fields, :data:`_TASK_FIELDS`),
its length and time distributions (``DEFAULTS`` per kind, documented in the README), renamed
fields, a dataset, abnormal cases and a shared prefix. A class reading a Spec-Bench file becomes
one class per task category (:mod:`tokenswarm.workload.scenario.specbench`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from tokenswarm.manifest import V2_RENAMED_CLASS_FIELDS
from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario.body import _SAMPLING, _parse_extra_body, _parse_models, _parse_sampling
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import (
    _CLASS_NAME,
    ABNORMAL_CASES,
    DATASET_FORMATS,
    KINDS,
    PREFIX_POPULARITY,
    RESPONSE_FORMATS,
    TASK_DRAWS,
    DatasetConfig,
    Sampling,
    SharedPrefix,
    TaskConfig,
    TrafficConfig,
)
from tokenswarm.workload.scenario.paths import _resolve_file
from tokenswarm.workload.scenario.specbench import _categories, _spec_bench_source, _spec_bench_split

_TRAFFIC = ("seed", "keep_outputs", "tokenizer", "sampling", "classes", "task_draw", "extra_body")
_TASK_COMMON = ("kind", "weight", "max_tokens", "think_time_s", "sampling", "dataset", "extra_body",
                "shared_prefix", "model")
_TASK_FIELDS = {
    "qa": _TASK_COMMON + ("prompt_tokens",),
    "summarization": _TASK_COMMON + ("document_tokens",),
    "code": _TASK_COMMON + ("prompt_tokens", "completion_share"),
    "multi_turn": _TASK_COMMON + ("prompt_tokens", "followup_tokens", "turns"),
    "abnormal": ("kind", "weight", "prompt_tokens", "max_tokens", "think_time_s", "sampling", "cases",
                 "extra_body", "model"),
    "extraction": ("kind", "weight", "max_tokens", "think_time_s", "sampling", "extra_body", "shared_prefix",
                   "document_tokens", "response_format", "model"),
}
_SHARED_PREFIX = ("tokens", "count", "popularity", "zipf_s")

#: per-kind defaults of the length/time distributions (documented in the README)
DEFAULTS: dict[str, dict[str, Any]] = {
    "qa": {
        "prompt_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.5, "min": 8, "max": 400},
        "max_tokens": {"dist": "uniform", "min": 32, "max": 256},
    },
    "summarization": {
        "document_tokens": {"dist": "uniform", "min": 1000, "max": 8000},
        "max_tokens": {"dist": "uniform", "min": 64, "max": 256},
    },
    "code": {
        "prompt_tokens": {"dist": "uniform", "min": 200, "max": 2000},
        "max_tokens": {"dist": "uniform", "min": 64, "max": 512},
    },
    "multi_turn": {
        "prompt_tokens": {"dist": "lognormal", "mean": 80, "sigma": 0.6, "min": 8, "max": 1000},
        "followup_tokens": {"dist": "lognormal", "mean": 30, "sigma": 0.6, "min": 4, "max": 300},
        "max_tokens": {"dist": "uniform", "min": 32, "max": 256},
        "turns": {"dist": "uniform", "min": 2, "max": 5},
        "think_time_s": {"dist": "uniform", "min": 0.5, "max": 2.0},
    },
    "abnormal": {
        "prompt_tokens": {"dist": "fixed", "value": 32},
        "max_tokens": {"dist": "fixed", "value": 16},
    },
    "extraction": {
        "document_tokens": {"dist": "uniform", "min": 200, "max": 1500},
        "max_tokens": {"dist": "uniform", "min": 128, "max": 384},
    },
}


def _parse_traffic(top: _Section, file: str, base_dir: Path,
                   target_extra: dict[str, Any] | None = None) -> TrafficConfig:
    tr = top.section("traffic", _TRAFFIC)
    traffic_extra = _parse_extra_body(tr)
    inherited = {**(target_extra or {}), **traffic_extra}
    seed = tr.num("seed", 0, integer=True)
    tokenizer = None
    if tr.has("tokenizer"):
        raw = tr.str_("tokenizer")
        tokenizer = _resolve_file(raw, base_dir)
        if tokenizer is None:
            raise tr.err(
                "tokenizer", f"a tokenizer.json file (relative to {base_dir} or the working directory)"
            )
        try:
            import tokenizers  # noqa: F401  (optional dependency, only needed when named)
        except ImportError:
            raise tr.err(
                "tokenizer",
                "the 'tokenizers' package to be installed for a local tokenizer (pip install tokenizers)",
            ) from None
    base_sampling = _parse_sampling(tr.section("sampling", _SAMPLING + ("max_tokens",)), Sampling())
    classes_raw = tr.data.get("classes")
    if not isinstance(classes_raw, dict) or not classes_raw:
        raise tr.err("classes", "a mapping of task name -> task config (at least one)")
    classes: list[TaskConfig] = []
    for cname, cfg in classes_raw.items():
        for task in _parse_task(str(cname), cfg, tr.at(f"classes.{cname}"), file, base_dir, base_sampling,
                                inherited):
            if any(c.name == task.name for c in classes):
                raise tr.err(f"classes.{cname}", "class names unique after Spec-Bench classes are split into "
                             f"their categories ({task.name!r} twice)")
            classes.append(task)
    if sum(c.weight for c in classes) <= 0:
        raise ScenarioError(
            file, tr.at("classes"), "at least one class with weight > 0", {c.name: c.weight for c in classes}
        )
    return TrafficConfig(
        seed=seed, keep_outputs=tr.bool_("keep_outputs", False), tokenizer=tokenizer, classes=tuple(classes),
        task_draw=tr.str_("task_draw", "per_user", TASK_DRAWS),
        extra_body=traffic_extra,
    )


#: Class fields that were renamed: old name -> new name (format version 3: the requested
#: lengths, sent as max_tokens, shared a name with the record's output_tokens, the length the
#: server counted). An old name still works, with a FutureWarning naming the file, the field
#: and the new name.
RENAMED_TASK_FIELDS: dict[str, str] = V2_RENAMED_CLASS_FIELDS


def _renamed_task_fields(cfg: dict[str, Any], path: str, file: str) -> dict[str, Any]:
    """``cfg`` with renamed fields under their new names (a copy); warns once per old name."""
    out = dict(cfg)
    for old, new in RENAMED_TASK_FIELDS.items():
        if old not in out:
            continue
        if new in out:
            raise ScenarioError(file, f"{path}.{old}", f"{new} only ({old} is its old name)", out[old],
                                problem=f"both {old} and {new} set")
        # FutureWarning, not DeprecationWarning: it is meant for whoever wrote the scenario
        warnings.warn(f"{file}: {path}.{old}: the field {old!r} is deprecated, write {new!r} (the requested "
                      "lengths, sent as max_tokens; a record's output_tokens is what the server counted)",
                      FutureWarning, stacklevel=2)
        out[new] = out.pop(old)
    return out


def _task_kind(name: str, cfg: dict[str, Any], path: str, file: str, spec_bench: bool) -> str:
    """A class's kind: given, else its name when that is a kind (Spec-Bench: multi_turn)."""
    # Spec-Bench questions are conversations (MT-Bench's have two turns): multi_turn unless told
    kind = cfg.get("kind", name if name in KINDS else ("multi_turn" if spec_bench else None))
    if kind not in KINDS:
        raise ScenarioError(
            file,
            f"{path}.kind",
            "one of " + ", ".join(KINDS) + " (required when the class name is not a kind)",
            kind,
        )
    if kind in ("summarization", "extraction") and "prompt_tokens" in cfg:
        raise ScenarioError(
            file,
            f"{path}.prompt_tokens",
            f"document_tokens for {kind}",
            cfg["prompt_tokens"],
            problem="not used by summarization",
        )
    return str(kind)


def _parse_dataset(
    s: _Section, kind: str, base_dir: Path, spec_bench: bool
) -> tuple[DatasetConfig, tuple[str, ...] | None]:
    """A class's ``dataset``, and for a Spec-Bench file the categories to split it into."""
    ds = s.section("dataset", ("path", "format", "category", "categories"))
    resolved = _resolve_file(ds.str_("path"), base_dir)
    if resolved is None:
        raise ds.err("path", f"an existing dataset file (relative to {base_dir} or the working directory)")
    fmt = ds.str_("format", "auto", DATASET_FORMATS)
    categories: tuple[str, ...] | None = None
    if spec_bench:
        fmt = "spec_bench"
        if kind != "multi_turn":
            raise s.err("kind", "multi_turn for a Spec-Bench dataset (its questions can have several turns, "
                        "sent as one conversation)", kind)
        if s.has("turns"):
            raise s.err("turns", "no turns for a Spec-Bench dataset (every turn of a question is sent)")
        categories = _categories(ds)
    elif ds.has("category") or ds.has("categories"):
        raise ds.err("category" if ds.has("category") else "categories",
                     "no category: only a spec_bench dataset has categories")
    return DatasetConfig(resolved, fmt, ds.str_("category") if ds.has("category") else None), categories


def _parse_cases(s: _Section) -> tuple[tuple[str, float], ...]:
    """An abnormal class's ``cases``: a list of names or a mapping of name -> weight."""
    raw_cases = s.raw("cases", {c: 1 for c in ABNORMAL_CASES})
    if isinstance(raw_cases, list):
        raw_cases = {c: 1 for c in raw_cases} if all(isinstance(c, str) for c in raw_cases) else raw_cases
    cs = _Section(raw_cases, s.at("cases"), s.file, ABNORMAL_CASES)
    cases = tuple((c, cs.num(c, 0.0, ge=0)) for c in ABNORMAL_CASES if cs.has(c))
    if not cases or sum(w for _, w in cases) <= 0:
        raise s.err("cases", "at least one of " + ", ".join(ABNORMAL_CASES) + " with weight > 0")
    return cases


def _parse_shared_prefix(s: _Section) -> SharedPrefix | None:
    if not s.has("shared_prefix"):
        return None
    sp = s.section("shared_prefix", _SHARED_PREFIX)
    if not sp.has("tokens"):
        raise sp.err("tokens", "a prefix length in tokens (an integer >= 1)")
    popularity = sp.str_("popularity", "uniform", PREFIX_POPULARITY)
    zipf_s = sp.num("zipf_s", 1.0, gt=0)
    if popularity != "zipf" and sp.has("zipf_s"):
        raise sp.err("zipf_s", "no zipf_s unless popularity is zipf")
    return SharedPrefix(tokens=sp.num("tokens", None, ge=1, integer=True),
                        count=sp.num("count", 1, ge=1, integer=True), popularity=popularity, zipf_s=zipf_s)


def _parse_task(
    name: str, cfg: Any, path: str, file: str, base_dir: Path, base_sampling: Sampling,
    inherited_extra: dict[str, Any] | None = None,
) -> list[TaskConfig]:
    """One class, or for a Spec-Bench dataset one class per task category (see :func:`_spec_bench_split`)."""
    if not _CLASS_NAME.match(name):
        raise ScenarioError(file, path, "a class name of letters, digits, '_' or '-'", name)
    if not isinstance(cfg, dict):
        raise ScenarioError(file, path, "a mapping (kind, weight, prompt_tokens, ...)", cfg)
    spec_bench = _spec_bench_source(cfg, path, file, base_dir)
    kind = _task_kind(name, cfg, path, file, spec_bench)
    cfg = _renamed_task_fields(cfg, path, file)
    s = _Section(cfg, path, file, _TASK_FIELDS[kind])
    d = DEFAULTS[kind]
    weight = s.num("weight", 1.0, ge=0)
    max_tokens = s.required_dist("max_tokens", d["max_tokens"], floor=1, integer=True)
    document = s.dist("document_tokens", d.get("document_tokens"), floor=1, integer=True)
    prompt = (
        s.required_dist("document_tokens", d.get("document_tokens"), floor=1, integer=True)
        if kind in ("summarization", "extraction")
        else s.required_dist("prompt_tokens", d["prompt_tokens"], floor=0 if kind == "abnormal" else 1, integer=True)
    )
    turns = s.dist("turns", d.get("turns"), floor=1, integer=True)
    followup = s.dist("followup_tokens", d.get("followup_tokens"), floor=1, integer=True)
    think = s.required_dist("think_time_s", d.get("think_time_s", 0), floor=0, integer=False)
    sampling = _parse_sampling(s.section("sampling", _SAMPLING + ("max_tokens",)), base_sampling)
    dataset, categories = _parse_dataset(s, kind, base_dir, spec_bench) if s.has("dataset") else (None, None)
    if spec_bench:
        turns = None  # every turn of a question is sent
        if not s.has("think_time_s"):
            think = s.required_dist("think_time_s", 0, floor=0, integer=False)  # Spec-Bench: turns back to back
    completion_share = s.num("completion_share", 0.5, ge=0, le=1)
    class_extra = _parse_extra_body(s)
    if kind == "extraction" and s.str_("response_format", "json_schema", RESPONSE_FORMATS) != "none":
        for level in (class_extra, inherited_extra or {}):
            if "response_format" in level:
                raise s.err("response_format", "response_format: none when extra_body sets response_format",
                            s.raw("response_format", "json_schema"))
    cases = _parse_cases(s) if kind == "abnormal" else ()
    task = TaskConfig(
        name=name,
        kind=kind,
        weight=weight,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        document_tokens=document,
        turns=turns,
        think_time_s=think,
        sampling=sampling,
        dataset=dataset,
        followup_tokens=followup,
        completion_share=completion_share,
        abnormal_cases=cases,
        extra_body={**(inherited_extra or {}), **class_extra},
        class_extra_body=class_extra,
        response_format=s.str_("response_format", "json_schema", RESPONSE_FORMATS) if kind == "extraction" else "none",
        shared_prefix=_parse_shared_prefix(s),
        models=_parse_models(s, one_name=True) if s.has("model") else (),
    )
    if dataset is None or dataset.format != "spec_bench" or dataset.category is not None:
        return [task]
    return _spec_bench_split(task, categories, s)
