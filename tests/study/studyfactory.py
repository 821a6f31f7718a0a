"""Hand-made study directories: a study.json and one run directory per arm-round, built from
synthetic records (tests.analysis.runfactory), so the study report is tested without a load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.analysis.runfactory import T0, record, step, write_run

#: Two load steps (closed loop): c1 then c8, 60 s steady windows after 5 s of warm-up.
STEPS = [step(0, "concurrency", 1, T0, T0 + 5, T0 + 65), step(1, "concurrency", 8, T0 + 65, T0 + 70, T0 + 130)]
SCENARIO = {"name": "mix", "slo": {"ttft_ms": 1000, "tpot_ms": 100},
            "traffic": {"task_draw": "per_user", "classes": {"qa": {"weight": 4}, "code": {"weight": 4},
                                                             "math": {"weight": 1}}},
            "load": {"mode": "closed", "steps": [1, 8], "warmup_s": 5, "step_duration_s": 60}}


def _records(arm: str, counts: dict[str, int], ttft_qa_c8_ms: float) -> list[dict[str, Any]]:
    """Per step and task, ``counts[task]`` successful requests spread over the steady window.

    The baseline streams 16 one-token chunks 40 ms apart; the draft arm 4 chunks of 4 tokens
    (speculation), 40 ms apart: about 3x the per-request tokens/s. Deterministic jitter keeps
    the bootstrap honest.
    """
    out = []
    i = 0
    for s in STEPS:
        for task, n in counts.items():
            for j in range(n):
                jitter = 1.0 + 0.2 * ((j * 7) % 10) / 10.0
                ttft = 100.0 * jitter
                if arm != "base" and task == "qa" and s["index"] == 1:
                    ttft = ttft_qa_c8_ms * jitter  # the candidate's TTFT regression
                if arm == "base":
                    offs = [ttft + k * 40.0 * jitter for k in range(16)]
                    toks = [1] * 16
                else:
                    offs = [ttft + k * 40.0 * jitter for k in range(4)]
                    toks = [4] * 4
                sent = s["steady_at"] + 1.0 + j * (55.0 / n)
                out.append(record(i, task=task, step=s["index"], phase="steady", sent_at_s=sent,
                                  chunk_offsets_ms=offs, chunk_tokens=toks))
                i += 1
    return out


def _gpu_lines(memory_mib: float, power_w: float) -> list[dict[str, Any]]:
    """DCGM exporter scrapes every 5 s over the whole run (steady memory and power)."""
    lines = []
    for k in range(27):
        t = T0 + k * 5.0
        samples = [{"name": n, "labels": {"gpu": "0", "UUID": "GPU-a"}, "value": v} for n, v in (
            ("DCGM_FI_DEV_FB_USED", memory_mib), ("DCGM_FI_DEV_FB_FREE", 80000 - memory_mib),
            ("DCGM_FI_DEV_GPU_UTIL", 80.0), ("DCGM_FI_DEV_POWER_USAGE", power_w),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", power_w * 1000.0 * k * 5.0))]
        lines.append({"scraped_at": t, "source": "gpu", "url": "http://127.0.0.1:9400/metrics", "step": None,
                      "error": None, "samples": samples})
    return lines


def write_study(root: Path, *, rounds: int = 2, counts: dict[str, int] | None = None,
                overloaded: tuple[str, int] | None = None, stall: tuple[float, float] = (T0 + 90.0, T0 + 95.0),
                gpu: bool = True, ttft_qa_c8_ms: float = 350.0, slo: dict[str, Any] | None = None) -> Path:
    """A finished two-arm study (``base`` and ``draft``) under ``root``.

    ``overloaded=(arm, round)`` gives that run an event-loop stall (250 ms) during ``stall``
    (epoch seconds; by default inside the c8 steady window), as the generator's health monitor
    records it.
    """
    counts = counts or {"qa": 40, "code": 40, "math": 5}
    scenario = dict(SCENARIO) if slo is None else {**SCENARIO, "slo": slo}
    arm_rounds = []
    for r in range(1, rounds + 1):
        for arm in ("base", "draft"):
            run_dir = f"runs/{arm}-r{r}"
            health: dict[str, Any] = {"cpu_warning": False, "max_loop_lag_ms": 3.0, "late_dispatches": 0,
                                      "untrusted_windows": []}
            if overloaded == (arm, r):
                health.update(max_loop_lag_ms=250.0,
                              untrusted_windows=[[stall[0], stall[1], "w0: event-loop lag 250 ms > 20 ms"]])
            mem, power = (40000.0, 300.0) if arm == "base" else (43174.4, 354.0)
            write_run(root / run_dir, _records(arm, counts, ttft_qa_c8_ms), steps=STEPS, scenario=scenario,
                      run_id=f"{arm}-r{r}", generator_health=health,
                      server_metrics=_gpu_lines(mem, power) if gpu else None)
            arm_rounds.append({"round": r, "arm": arm, "status": "done", "run_dir": run_dir})
    study = {"study_format_version": 1, "tokenswarm_version": "0.1.0", "scenario_path": "scenarios/mix.yaml",
             "arms": [{"name": "base", "command": "tokenswarm sim --port {port} --spec-method none", "host": None},
                      {"name": "draft", "command": "tokenswarm sim --port {port} --spec-method draft", "host": None}],
             "baseline_arm": "base", "overrides": [], "rounds_count": rounds,
             "order": [[e["round"], e["arm"]] for e in arm_rounds],
             "machine": {"platform": "Linux", "cpu_count": 2, "python_version": "3.11"},
             "complete": True, "failures": [], "arm_rounds": arm_rounds}
    (root / "study.json").write_bytes(orjson.dumps(study))
    return root
