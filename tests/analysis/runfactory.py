"""Hand-made run directories for the analysis tests (records built with the shared RequestRecord)."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Any, Iterable

import orjson

from tokenswarm.record import FORMAT_VERSION, RequestRecord

T0 = 1_764_480_000.0


def key(i: int) -> str:
    """A request_key (sha256 hex) for request number ``i``."""
    return hashlib.sha256(f"req-{i}".encode()).hexdigest()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def record(i: int = 0, **kw: Any) -> dict[str, Any]:
    """A valid successful record dict; keyword arguments override fields."""
    sent = kw.pop("sent_at_s", T0 + i)
    lag = kw.pop("schedule_lag_ms", 0.0)
    offs = kw.pop("chunk_offsets_ms", [100.0, 120.0, 140.0, 160.0])
    toks = kw.pop("chunk_tokens", [1] * len(offs) if offs is not None else None)
    text = kw.pop("output_text", None)
    out_tokens = kw.pop("output_tokens", sum(toks) if toks else (len(offs) if offs else None))
    base = dict(
        run_id="run", worker_id="w0", seq=i, task="qa", user_class="QAUser", outcome="ok",
        request_key=key(i), scheduled_at_s=sent - lag / 1000.0, sent_at_s=sent, schedule_lag_ms=lag,
        step=None, phase=None, ttft_ms=offs[0] if offs else None,
        e2e_ms=(offs[-1] + 5.0) if offs else None, chunk_offsets_ms=offs, chunk_tokens=toks,
        prompt_tokens=10, output_tokens=out_tokens, finish_reason="stop",
        output_sha256=sha(text) if text is not None else sha(f"out-{i}"), output_text=text,
        temperature=0.0, max_tokens=256,
    )
    base.update(kw)
    return RequestRecord(**base).to_dict()


def failed(i: int = 0, outcome: str = "timeout", **kw: Any) -> dict[str, Any]:
    """A failed record (no chunks, no latency)."""
    kw.setdefault("error", outcome)
    return record(i, outcome=outcome, chunk_offsets_ms=[], chunk_tokens=None, ttft_ms=None, e2e_ms=None,
                  output_tokens=None, output_sha256=None, finish_reason=None, **kw)


def step(index: int, kind: str, target: float, started: float, steady: float, ended: float) -> dict[str, Any]:
    return {"index": index, "name": f"{kind[0]}{target:g}", "kind": kind, "target": target,
            "started_at": started, "steady_at": steady, "ended_at": ended}


def manifest(**kw: Any) -> dict[str, Any]:
    m = {
        "format_version": FORMAT_VERSION, "run_id": "run-1", "tokenswarm_version": "0.1.0",
        "scenario": {}, "scenario_name": "mix", "target": {"base_url": "http://127.0.0.1:8000", "model": "sim"},
        "load_mode": "closed", "started_at": T0, "ended_at": T0 + 100, "steps": [],
        "workers": [], "totals": {}, "generator_health": {"cpu_warning": False, "max_loop_lag_ms": 1.0,
                                                          "late_dispatches": 0}, "warnings": [],
    }
    m.update(kw)
    return m


def write_run(
    path: Path,
    records: Iterable[dict[str, Any]],
    gz: bool = False,
    rotate: int | None = None,
    server_metrics: list[dict[str, Any]] | None = None,
    tail: bytes = b"",
    **manifest_kw: Any,
) -> Path:
    """Write a run directory; ``rotate`` splits records into files of that many lines."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_bytes(orjson.dumps(manifest(**manifest_kw)))
    lines = [orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in records]
    if rotate:
        chunks = [lines[i:i + rotate] for i in range(0, len(lines), rotate)]
        for n, chunk in enumerate(chunks, 1):
            name = f"records-{n:06d}.jsonl" + (".gz" if gz else "")
            data = b"".join(chunk)
            (path / name).write_bytes(gzip.compress(data) if gz else data)
    else:
        data = b"".join(lines) + tail
        if gz:
            (path / "records.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (path / "records.jsonl").write_bytes(data)
    if server_metrics is not None:
        (path / "server_metrics.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in server_metrics))
    return path


def scrape(t: float, values: dict[str, float], per_pos: list[float] | None = None, engines: int = 1,
           step_index: int | None = None) -> dict[str, Any]:
    """One server_metrics line; values are split evenly over ``engines`` label sets (``_perc``
    fractions are per engine, so each engine reports the value itself)."""
    samples = []
    for name, v in values.items():
        for e in range(engines):
            share = v if name.endswith("_perc") else v / engines
            samples.append({"name": name, "labels": {"engine": str(e), "model_name": "m"}, "value": share})
            if name.endswith("_total"):
                samples.append({"name": name[:-6] + "_created", "labels": {"engine": str(e)}, "value": 1.7e9})
    for p, v in enumerate(per_pos or []):
        for e in range(engines):
            samples.append({"name": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                            "labels": {"engine": str(e), "model_name": "m", "position": str(p)}, "value": v / engines})
    return {"scraped_at": t, "source": "target", "url": "http://127.0.0.1:8000/metrics", "step": step_index,
            "error": None, "samples": samples}
