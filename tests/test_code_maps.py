"""The three code maps (README.md, tokenswarm/__init__.py, docs/layout.md) name the same rooms
as the tree: every package is on each map, and no map names a package that is gone."""

import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tokenswarm"


def packages() -> set[str]:
    """tokenswarm's subpackages: those under tokenswarm/, and the Python packages that
    pyproject.toml's package-dir maps into it (the analysis: the top-level analysis/ folder)."""
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    mapped_packages = {name.removeprefix("tokenswarm.") for name, folder in mapped.items()
                       if name.count(".") == 1 and (ROOT / folder / "__init__.py").exists()}
    assert "analysis" in mapped_packages
    return {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | mapped_packages


def modules() -> set[str]:
    return {p.name for p in PKG.glob("*.py") if p.name != "__init__.py"}


def code_block_after(text: str, heading: str) -> str:
    section = text[text.index(heading):]
    start = section.index("```\n") + 4
    return section[start:section.index("```", start)]


def tokenswarm_entries(block: str) -> tuple[set[str], set[str]]:
    """Packages (``name/``) and modules (``name.py``) listed two spaces in, under ``tokenswarm/``."""
    names = re.findall(r"^  ([a-z_]+/|[a-z_]+\.py)\s", block, flags=re.M)
    return {n[:-1] for n in names if n.endswith("/")}, {n for n in names if n.endswith(".py")}


def readme_map() -> tuple[set[str], set[str]]:
    pkgs, mods = tokenswarm_entries(code_block_after((ROOT / "README.md").read_text(), "## Code map"))
    return pkgs | {"analysis"}, mods  # the README shows the analysis at the top level, where its folder is


def layout_map() -> tuple[set[str], set[str]]:
    pkgs, mods = tokenswarm_entries(code_block_after((ROOT / "docs" / "layout.md").read_text(), "## Where things are"))
    return pkgs | {"analysis"}, mods


def init_map() -> set[str]:
    import tokenswarm

    return set(re.findall(r"``tokenswarm\.([a-z_]+)``\s+-", tokenswarm.__doc__ or ""))


@pytest.mark.parametrize("name, listed", [("README.md", lambda: readme_map()[0]),
                                          ("docs/layout.md", lambda: layout_map()[0]),
                                          ("tokenswarm/__init__.py", init_map)])
def test_every_code_map_names_exactly_the_packages_in_the_tree(name, listed):
    got = listed()
    assert not packages() - got, f"{name} misses {sorted(packages() - got)}"
    assert not got - packages(), f"{name} names packages that are not in the tree: {sorted(got - packages())}"


def test_the_layout_page_names_every_top_level_module_and_the_readme_none_that_is_gone():
    assert layout_map()[1] == modules() - {"__main__.py"} or layout_map()[1] == modules(), \
        f"docs/layout.md lists {sorted(layout_map()[1])}, the tree has {sorted(modules())}"
    assert readme_map()[1] <= modules(), sorted(readme_map()[1] - modules())
