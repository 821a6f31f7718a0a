"""The manual: generated reference pages match the code, and the site builds in strict mode."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tokenswarm import record

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _load("docs_gen_reference", ROOT / "docs" / "gen" / "reference.py")
hooks = _load("docs_gen_hooks", ROOT / "docs" / "gen" / "hooks.py")


def test_every_record_field_has_exactly_one_description_in_field_docs():
    assert set(record.FIELD_DOCS) == set(record.FIELD_NAMES), (
        f"undocumented: {sorted(set(record.FIELD_NAMES) - set(record.FIELD_DOCS))}, "
        f"documented but not fields: {sorted(set(record.FIELD_DOCS) - set(record.FIELD_NAMES))}"
    )
    assert all(text.strip() for text in record.FIELD_DOCS.values())


def test_committed_reference_pages_match_what_the_code_generates():
    assert reference.stale_pages() == [], "run: python docs/gen/reference.py"


def test_a_stale_reference_page_is_detected(tmp_path):
    for name, build in reference.PAGES.items():
        (tmp_path / name).write_text(build(), encoding="utf-8")
    assert reference.stale_pages(tmp_path) == []
    page = tmp_path / "glossary.md"
    page.write_text(page.read_text(encoding="utf-8").replace("ttft_ms", "ttft"), encoding="utf-8")
    assert reference.stale_pages(tmp_path) == ["glossary.md"]


def test_the_record_page_lists_every_field_with_its_description():
    page = reference.record_page()
    for name, text in record.FIELD_DOCS.items():
        assert f"| `{name}` |" in page and text.split("`")[0][:30] in page


def test_nav_entries_of_absent_optional_pages_are_dropped_and_others_kept(tmp_path):
    (tmp_path / "index.md").write_text("# x\n")
    (tmp_path / "security.md").write_text("# present\n")
    nav = [{"Home": "index.md"}, {"Using": [{"CI": "ci.md"}, {"Security": "security.md"}]}, {"Only": [{"S": "studies.md"}]}]
    config = hooks.on_config({"nav": nav, "docs_dir": str(tmp_path)})
    assert config["nav"] == [{"Home": "index.md"}, {"Using": [{"Security": "security.md"}]}]


def test_links_to_absent_optional_pages_become_text_and_other_links_stay(tmp_path):
    (tmp_path / "index.md").write_text("# x\n")
    hooks.on_config({"nav": [{"CI": "ci.md"}], "docs_dir": str(tmp_path)})
    page = SimpleNamespace(file=SimpleNamespace(src_uri="results/index.md"))
    text = "see [CI](../ci.md#stage), [missing](../nope.md) and [home](../index.md)"
    assert hooks.on_page_markdown(text, page, {}, None) == (
        "see CI, [missing](../nope.md) and [home](../index.md)"
    )


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed (the docs extra)")
def test_the_docs_site_builds_in_strict_mode(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "record-fields" / "index.html").is_file()
