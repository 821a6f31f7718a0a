"""SLO results in a report: the verdict banner, the step x task matrix, one result's label, the counts."""

from __future__ import annotations

from typing import Any

from tokenswarm.analysis.render_format import Block, fmt
from tokenswarm.analysis.slo import judged_label


def verdict_blocks(s: dict[str, Any]) -> list[Block]:
    """The gate's verdict: one banner line (PASS, FAIL, NOT JUDGED), the step x task matrix, the misses."""
    results = s["slo_results"]
    short = [r for r in results if r.get("not_enough_samples")]
    missed = [r for r in results if not r["passed"] and not r.get("not_enough_samples")]
    suspect = " Suspect: the generator was overloaded (see the warnings)." if s["generator_health"]["overloaded"] else ""
    if missed:
        colour, text = "red", f"FAIL: {len(missed)} of {len(results)} SLO checks missed"
    elif short:
        colour, text = "yellow", f"NOT JUDGED: {len(short)} of {len(results)} SLO checks rest on too few samples"
    else:
        colour, text = "green", f"PASS: all {len(results)} SLO checks met"
    if short and missed:
        text += f", {len(short)} not judged (too few samples)"
    b: list[Block] = [("h2", "Verdict"), ("banner", colour, text + "." + suspect)]
    b += slo_matrix_blocks(results)
    return b


def slo_matrix_blocks(results: list[dict[str, Any]]) -> list[Block]:
    """SLO results as a step x task matrix (PASS, or the failing SLOs), then the failures in full."""
    tasks: list[str] = []
    steps: list[str] = []
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        st, task = str(r["step_name"]), r["task"]
        if task not in tasks:
            tasks.append(task)
        if st not in steps:
            steps.append(st)
        cells.setdefault((st, task), []).append(r)
    tasks.sort(key=lambda t: (t != "all", t))

    def cell(st: str, task: str) -> str:
        rs = cells.get((st, task))
        if not rs:
            return "—"
        bad = [r["slo_name"] for r in rs if not r["passed"] and not r.get("not_enough_samples")]
        parts = ["FAIL " + ", ".join(bad)] if bad else []
        for r in rs:
            if r.get("not_enough_samples"):
                parts.append(f"{slo_label(r)}: {r['slo_name']}")
        return "; ".join(parts) or "PASS"

    out: list[Block] = [("table", ["step"] + tasks, [[st] + [cell(st, t) for t in tasks] for st in steps])]
    failing = [r for r in results if not r["passed"] and not r.get("not_enough_samples")]
    if failing:
        out.append(("list", [f"{r['step_name']} / {r['task']}: {r['slo_name']} observed {fmt(r['observed_value'])}, "
                             f"needs {r['comparison']} {fmt(r['threshold_value'])}"
                             + (f" ({r['detail']})" if r["detail"] else "") for r in failing]))
    short = [r for r in results if r.get("not_enough_samples")]
    if short:
        out.append(("p", f"{len(short)} check(s) not judged: their percentile rests on fewer samples than it needs "
                         "(n >= 10 / (1 - q)); a check that is not judged is neither a pass nor a miss of the "
                         "threshold, and a gate counts it as not passed."))
    return out


def slo_label(r: dict[str, Any]) -> str:
    """PASS, FAIL or "not judged (n=…, needs …)" of one SLO result dict."""
    if r.get("not_enough_samples"):
        return judged_label(r.get("samples_count"), r.get("samples_needed_count"))
    return "PASS" if r["passed"] else "FAIL"


def slo_counts_text(results: list[dict[str, Any]]) -> str:
    """"3 of 10 checks pass, 2 miss, 5 not judged (too few samples)"."""
    short = sum(1 for r in results if r.get("not_enough_samples"))
    passed = sum(1 for r in results if r["passed"])
    missed = len(results) - passed - short
    text = f"{passed} of {len(results)} SLO checks pass, {missed} miss"
    return text + (f", {short} not judged (too few samples)" if short else "")
