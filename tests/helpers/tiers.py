"""A CI tier that was asked for cannot pass by skipping.

``TOKENSWARM_CI_REQUIRE_TIERS=browser,real_engine`` (set by ``.ci/run`` for every tier whose
install succeeded) turns a skip of a test carrying one of those markers into a failure that
names the tier and the skip reason, and fails the session when a required tier ran no test
at all (deselected, or its files not collected). Without the variable nothing changes: a
developer's machine without Chromium or vLLM still skips those tests. Hooks are re-exported
by ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "TOKENSWARM_CI_REQUIRE_TIERS"
#: The report property naming the required tiers a test ran in (its markers', not its path's).
TIERS_RAN = "tokenswarm_tiers_ran"
_ran: set[str] = set()


def required_tiers() -> set[str]:
    return {t.strip() for t in os.environ.get(ENV, "").split(",") if t.strip()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    rep = outcome.get_result()
    tiers = required_tiers() & {m.name for m in item.iter_markers()}
    if not tiers:
        return
    if rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"tier {', '.join(sorted(tiers))} is required here ({ENV}) but this test skipped: {reason}. "
                        "Fix the tier's install (see its log), or opt out with TOKENSWARM_CI_SKIP_TIERS.")
    elif rep.when == "call":
        # the tiers of the test's markers, on the report: pytest-xdist carries it to the controller
        rep.user_properties.append((TIERS_RAN, sorted(tiers)))


def pytest_runtest_logreport(report: Any) -> None:
    """Count the tiers that ran. Called where the reports arrive: in a plain session, and in
    pytest-xdist's controller for every worker's report (the workers' own counts stay there)."""
    for name, tiers in report.user_properties:
        if name == TIERS_RAN:
            _ran.update(tiers)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker runs a share of the tests: the controller judges the session
    missing = required_tiers() - _ran
    if missing and exitstatus in (0, 5):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = (f"tier(s) {', '.join(sorted(missing))} required ({ENV}) but no test of theirs ran; "
                "CI cannot pass without them (opt out with TOKENSWARM_CI_SKIP_TIERS)")
        if reporter is not None:
            reporter.write_line(text, red=True)
        session.exitstatus = 1
