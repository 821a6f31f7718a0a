"""The rooms import one way: the import contracts in pyproject.toml hold, and they can fail.

import-linter runs through ``.ci/mapped.py``, which feeds it pyproject's package-dir mapping:
the analysis (the top-level ``analysis/`` folder, imported as ``tokenswarm.analysis``) is in
the graph at its real path, with its own imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mapped(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    # this checkout's packages, whatever else an installed tokenswarm points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "mapped.py"), tool, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_import_contract_in_pyproject_is_kept():
    done = _mapped("lint-imports", "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def lint_layers_upside_down(tmp_path, *layers: str) -> subprocess.CompletedProcess:
    """``lint-imports`` (through the mapping) of one layers contract, ``layers`` top first."""
    config = tmp_path / "upside-down.ini"
    config.write_text(
        "[importlinter]\nroot_packages =\n    tokenswarm\n\n"
        "[importlinter:contract:upside-down]\nname = upside down\ntype = layers\n"
        "layers =\n" + "".join(f"    {layer}\n" for layer in layers)
    )
    return _mapped("lint-imports", "--no-cache", "--config", str(config))


def test_a_contract_the_code_breaks_is_reported_as_broken(tmp_path):
    # The same rooms upside down: record at the top, entry points at the bottom. If the checker
    # did not see the real imports, this would pass too.
    done = lint_layers_upside_down(tmp_path, "tokenswarm.record", "tokenswarm.load", "tokenswarm.orchestrate")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "tokenswarm.load" in done.stdout and "BROKEN" in done.stdout


def test_the_analysis_own_imports_are_in_the_graph_and_can_break_a_contract(tmp_path):
    # The record below the analysis, upside down: only an import made inside analysis/ (the
    # loader reads records) can break it, so the analysis' files were scanned under their name.
    done = lint_layers_upside_down(tmp_path, "tokenswarm.record", "tokenswarm.analysis")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "tokenswarm.analysis.loader.records -> tokenswarm.record" in done.stdout, done.stdout[-3000:]


def test_the_drawing_of_the_house_shows_the_arrows_out_of_the_analysis():
    # docs/layout.md's command: before the mapping, the analysis was a node with no arrow out.
    done = _mapped("import-linter", "drawgraph", "tokenswarm")
    assert done.returncode == 0, done.stderr[-2000:]
    arrows = {line.split("->")[1].strip().strip('"') for line in done.stdout.splitlines()
              if line.strip().startswith('".analysis" ->')}
    assert {".record", ".manifest", ".metrics"} <= arrows, done.stdout
    inside = _mapped("import-linter", "drawgraph", "tokenswarm.analysis")
    assert inside.returncode == 0 and '".report" -> ' in inside.stdout, inside.stdout[-2000:] + inside.stderr[-2000:]


def test_plain_lint_imports_refuses_a_graph_without_the_analysis():
    # Without the mapping the analysis is missing from grimp's walk of tokenswarm/: the layers
    # contract names it, so the plain command fails instead of passing over a smaller house.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                           "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Missing layer 'tokenswarm.analysis'" in done.stdout + done.stderr, done.stdout[-2000:]


def _drawing_on_the_layout_page() -> dict[str, set[str]]:
    page = (ROOT / "docs" / "layout.md").read_text()
    section = page[page.index("`import-linter drawgraph tokenswarm` prints"):]
    block = section[section.index("```\n") + 4:]
    block = block[:block.index("```")]
    drawn = {}
    for line in block.strip().splitlines():
        source, targets = line.split("->")
        drawn[source.strip()] = set(targets.split("(")[0].split())  # "(kstamp only)": a remark
    return drawn


def test_the_layout_pages_drawing_is_the_graph_of_this_tree():
    # The page shows what the command prints (less .redact, imported by most rooms): an arrow
    # added or gone without the page following fails here, with the drawing to paste.
    done = _mapped("import-linter", "drawgraph", "tokenswarm")
    assert done.returncode == 0, done.stderr[-2000:]
    measured: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if "->" in line:
            source, target = (part.strip().strip('"') for part in line.split("->"))
            if target != ".redact":
                measured.setdefault(source, set()).add(target)
    width = max(map(len, measured))
    drawing = "\n".join(f"{s:<{width}} -> {' '.join(sorted(t))}" for s, t in sorted(measured.items()))
    assert _drawing_on_the_layout_page() == measured, f"docs/layout.md's drawing should read:\n{drawing}"
