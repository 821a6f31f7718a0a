"""docs/environment.md names every TOKENSWARM_* variable the project reads, and only those."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where a variable can be read: the package, the analysis, the entry points, CI and the tests.
SOURCES = ["tokenswarm", "analysis", "locustfiles", ".ci", "tests", "deploy", "docker-compose.yml", "Dockerfile"]
SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".c", ""}
#: Names that look like variables but are not read from the environment.
NOT_VARIABLES = {"TOKENSWARM_WATCH_H"}  # the C header's include guard
VARIABLE = re.compile(r"\bTOKENSWARM_[A-Z0-9_]+\b")


def _read_in_code() -> set[str]:
    found: set[str] = set()
    for name in SOURCES:
        base = ROOT / name
        paths = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for p in paths:
            if p.suffix not in SUFFIXES or p.resolve() == Path(__file__).resolve() or "__pycache__" in p.parts:
                continue
            found |= set(VARIABLE.findall(p.read_text(errors="replace")))
    return found - NOT_VARIABLES


def _documented() -> set[str]:
    rows = [line for line in (ROOT / "docs" / "environment.md").read_text().splitlines() if line.startswith("| `")]
    return {VARIABLE.search(line).group(0) for line in rows}


def test_every_variable_the_code_reads_has_a_row_on_the_environment_page():
    missing = _read_in_code() - _documented()
    assert not missing, f"add these to docs/environment.md: {sorted(missing)}"


def test_the_environment_page_lists_no_variable_the_code_no_longer_reads():
    stale = _documented() - _read_in_code()
    assert not stale, f"docs/environment.md lists variables nothing reads: {sorted(stale)}"
