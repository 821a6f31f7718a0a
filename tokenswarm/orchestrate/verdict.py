"""The CI verdict: SLOs evaluated on the exact records, as files and an exit status.

Exit statuses (documented in the README):

* 0 -- every SLO met (or none given) and the run worked
* 1 -- at least one SLO missed, or not judged because its percentile rests on too few samples
  ("not enough samples": fewer than 10 / (1 - q) requests in the row; a gate never passes by chance)
* 2 -- bad configuration or usage (raised earlier, before any traffic)
* 3 -- the run itself broke: no successful request, no records, a worker lost, or records lost
* 130 -- the run was interrupted before its plan ended (Ctrl-C, SIGTERM, Locust's own stop)

The verdict printed and written says the status the process exits with: a run the circuit
breaker stopped, or one interrupted, never prints PASS.

Files written next to the records: ``slo.json`` (machine-readable verdict) and
``junit.xml`` (one test case per SLO and step/task row, so CI systems show it natively).
"""

from __future__ import annotations

import difflib
import json
import logging
from pathlib import Path
from typing import Any, Mapping
from xml.sax.saxutils import quoteattr

from tokenswarm.manifest import read_run_manifest
from tokenswarm.metrics import slo_name
from tokenswarm.workload.scenario import SLO_NAMES

EXIT_OK, EXIT_SLO_MISSED, EXIT_BAD_CONFIG, EXIT_RUN_BROKE = 0, 1, 2, 3
#: the run was interrupted before its plan ended (as a shell reports Ctrl-C)
EXIT_INTERRUPTED = 130


def parse_slo_args(items: list[str]) -> dict[str, Any]:
    """``["ttft_p95_ms=800", "code.ttft_p95_ms=1000"]`` -> an SLO block with ``per_task``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--slo {item!r}: expected NAME=VALUE, e.g. ttft_p95_ms=800")
        name, _, value = item.partition("=")
        task = None
        if "." in name:
            task, name = name.split(".", 1)
        name = slo_name(name, f"--slo {item}")
        known = tuple(SLO_NAMES) + ("ttft_ms", "tpot_ms", "e2e_ms")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"--slo {item!r}: unknown SLO {name!r}, expected one of {', '.join(known)}{hint}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"--slo {item!r}: expected a number after '=', got {value!r}") from None
        if task:
            out.setdefault("per_task", {}).setdefault(task, {})[name] = v
        else:
            out[name] = v
    return out


def merge_slos(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in base.items() if k != "per_task"}
    per_task = {k: dict(v) for k, v in (base.get("per_task") or {}).items()}
    for k, v in extra.items():
        if k == "per_task":
            for task, d in v.items():
                per_task.setdefault(task, {}).update(d)
        else:
            out[k] = v
    if per_task:
        out["per_task"] = per_task
    return out


def evaluate_run(run_dir: str | Path, slos: dict[str, Any], *,
                 outcomes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Verdict dict for a finished run directory (nothing printed, nothing written).

    SLOs are evaluated on the records read back from the run directory. Without SLOs the
    verdict only asks whether any request succeeded; ``outcomes`` (records per outcome, counted
    by the process that wrote them, as it wrote them) answers that without reading every record
    again. Without it (a master, or a finished run judged later) the records are read.
    """
    run_dir = Path(run_dir)
    manifest = read_run_manifest(run_dir)
    broken: list[str] = []
    lost = [w for w in manifest.workers if w.get("lost_reason")]
    if lost:
        broken.append(f"{len(lost)} worker(s) lost: " + "; ".join(f"{w['worker_id']} ({w['lost_reason']})" for w in lost))
    if manifest.totals.records_lost:
        broken.append(f"{manifest.totals.records_lost} record(s) lost (the manifest's warnings name them)")
    results: list[dict[str, Any]] = []
    if not slos and outcomes is not None:
        if not outcomes.get("ok"):  # the run broke: only then the analysis' wording of it
            from tokenswarm.analysis.errors import NoSuccessError  # the analysis (numpy): only when a run is judged

            counts = {o: n for o, n in sorted(outcomes.items()) if n}
            broken.append(f"no successful request: {NoSuccessError.among(run_dir, counts)}")
    else:
        # the analysis (numpy): only when a run is judged
        from tokenswarm.analysis.errors import AnalysisError, NoSuccessError
        from tokenswarm.analysis.loader import load_run  # the analysis (numpy): only when a run is judged
        from tokenswarm.analysis.per_request import require_success_in
        from tokenswarm.analysis.tables import evaluate

        try:
            run = load_run(run_dir)
            require_success_in(run)
            results = [r.to_dict() for r in evaluate(run, slos)] if slos else []
        except NoSuccessError as exc:
            broken.append(f"no successful request: {exc}")
        except AnalysisError as exc:
            broken.append(str(exc))
    failed = [r for r in results if not r["passed"]]
    if broken:
        status, reason = EXIT_RUN_BROKE, "; ".join(broken)
    elif failed:
        short = sum(1 for r in failed if r.get("not_enough_samples"))
        parts = [f"{len(failed) - short} of {len(results)} SLO checks missed"] if len(failed) > short else []
        if short:  # a check its samples cannot support is not a miss; it still fails the gate
            parts.append(f"{short} of {len(results)} not judged: not enough samples")
        status, reason = EXIT_SLO_MISSED, ", ".join(parts)
    else:
        status, reason = EXIT_OK, (f"all {len(results)} SLO checks met" if results else "no SLOs given; the run worked")
    return {"run_dir": str(run_dir), "run_id": manifest.run_id, "exit_status": status,
            "passed": status == EXIT_OK, "reason": reason, "slos": slos, "checks": results,
            "warnings": list(manifest.warnings)}


def write_junit(verdict: dict[str, Any], path: str | Path) -> None:
    """JUnit XML: one <testcase> per SLO check; a broken run is one failing case."""
    cases = []
    for r in verdict["checks"]:
        name = f"{r['slo_name']} [{r.get('step_name') or 'run'} / {r.get('task')}]"
        body = ""
        if not r["passed"]:
            msg = (f"observed {r['observed_value']} {r['unit']}, required {r['comparison']} "
                   f"{r['threshold_value']} {r['unit']}" + (f" ({r['detail']})" if r.get("detail") else ""))
            body = f"<failure message={quoteattr(msg)}/>"
        cases.append(f"  <testcase classname=\"tokenswarm.slo\" name={quoteattr(name)}>{body}</testcase>")
    if verdict["exit_status"] in (EXIT_RUN_BROKE, EXIT_INTERRUPTED):
        cases.append(f"  <testcase classname=\"tokenswarm.run\" name=\"run completed\">"
                     f"<failure message={quoteattr(verdict['reason'])}/></testcase>")
    failures = sum(1 for c in cases if "<failure" in c)
    xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"tokenswarm-slo\" tests=\"{len(cases)}\" "
           f"failures=\"{failures}\" errors=\"0\">\n" + "\n".join(cases) + "\n</testsuite>\n")
    Path(path).write_text(xml)


def verdict_table(verdict: dict[str, Any]) -> str:
    """A short terminal table: one line per SLO check, then the verdict."""
    lines = [f"{'SLO':<18} {'step':<8} {'task':<14} {'observed':>12} {'':>2} {'threshold':>10}  result"]
    for r in verdict["checks"]:
        obs = "-" if r["observed_value"] is None else f"{r['observed_value']:.4g}"
        lines.append(f"{r['slo_name']:<18} {str(r.get('step_name') or '-'):<8} {str(r.get('task')):<14} "
                     f"{obs:>12} {r['comparison']:>2} {r['threshold_value']:>10.4g}  "
                     + ("ok" if r["passed"] else _not_judged(r) if r.get("not_enough_samples") else "MISSED"))
    word = {EXIT_OK: "PASS", EXIT_SLO_MISSED: "FAIL (SLO missed)", EXIT_RUN_BROKE: "FAIL (run broke)",
            EXIT_INTERRUPTED: "INTERRUPTED"}[verdict["exit_status"]]
    checks = verdict["checks"]
    if verdict["exit_status"] == EXIT_SLO_MISSED and all(r["passed"] or r.get("not_enough_samples") for r in checks):
        word = "FAIL (SLO not judged: too few samples)"  # nothing was missed; the gate could not be judged
    lines.append(f"verdict: {word} - {verdict['reason']} (exit status {verdict['exit_status']})")
    return "\n".join(lines)


def _not_judged(r: dict[str, Any]) -> str:
    """The result word of a check its percentile's samples cannot support: not a miss."""
    n, need = r.get("samples_count"), r.get("samples_needed_count")
    return "NOT ENOUGH SAMPLES" + (f": not judged (n={n}, needs {need})" if n is not None and need else "")


def conclude(run_dir: str | Path, slos: dict[str, Any], *, broken: str | None = None,
             outcomes: Mapping[str, int] | None = None, interrupted: str | None = None) -> tuple[dict[str, Any] | None, int]:
    """The end of a run: write and print the verdict; return it and the process exit status.

    ``broken`` is the circuit breaker's message when it stopped the run: the exit status is
    then :data:`EXIT_RUN_BROKE` whatever the SLOs say, because the run did not measure the
    server it was meant to. ``interrupted`` is the stop reason of a run that ended before its
    plan did: :data:`EXIT_INTERRUPTED`. Either way the verdict says so, with what the SLOs alone
    gave. A verdict that cannot be evaluated is logged, never raised: it must not hide the
    run's own files, and the status says the run broke. ``outcomes``: see :func:`evaluate_run`.
    """
    try:
        v = write_verdict(run_dir, slos, outcomes=outcomes, broken=broken, interrupted=interrupted)
    except Exception as exc:
        logging.getLogger("tokenswarm").exception("tokenswarm: could not evaluate the SLO verdict: %s", exc)
        return None, EXIT_RUN_BROKE
    print(verdict_table(v), flush=True)
    return v, int(v["exit_status"])


def overruled(v: dict[str, Any], *, broken: str | None, interrupted: str | None) -> dict[str, Any]:
    """The SLO verdict ``v`` with the run's own ending over it: the circuit breaker's stop
    (:data:`EXIT_RUN_BROKE`), else an interruption (:data:`EXIT_INTERRUPTED`); the SLOs' own
    reason is kept after it."""
    if broken:
        status, why = EXIT_RUN_BROKE, broken
    elif interrupted:
        status, why = EXIT_INTERRUPTED, f"the run was interrupted ({interrupted}) before its plan ended"
    else:
        return v
    return {**v, "exit_status": status, "passed": False, "reason": f"{why}; the SLOs alone: {v['reason']}"}


def write_verdict(run_dir: str | Path, slos: dict[str, Any], *, outcomes: Mapping[str, int] | None = None,
                  broken: str | None = None, interrupted: str | None = None) -> dict[str, Any]:
    """Evaluate, write ``slo.json`` and ``junit.xml`` into ``run_dir``, return the verdict."""
    v = overruled(evaluate_run(run_dir, slos, outcomes=outcomes), broken=broken, interrupted=interrupted)
    Path(run_dir, "slo.json").write_text(json.dumps(v, indent=2))
    write_junit(v, Path(run_dir, "junit.xml"))
    return v
