"""MkDocs hooks: keep pages that other work adds later out of the nav until their file exists.

The manual's nav lists every page it will have. A few of them (:data:`OPTIONAL_PAGES`) are
written in parallel with the rest; until such a file is present, its nav entry is dropped and a
link to it becomes plain text, so ``mkdocs build --strict`` passes before and after it lands.
Any other missing page or broken link still fails the strict build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

OPTIONAL_PAGES: frozenset[str] = frozenset(
    {
        "how-latency-is-measured.md",
        "truth-server.md",
        "studies.md",
        "security.md",
        "ci.md",
        "resources.md",
        "observability.md",
        "real-engines.md",
        "workloads.md",
        "record-store.md",
        "results/accuracy.md",
        "results/study.md",
        "results/security.md",
        "results/resources.md",
        "results/workloads.md",
        "results/record-store.md",
        "results/generator.md",
    }
)

_LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+\.md)(#[^)\s]*)?\)")
_absent: set[str] = set()


def _prune(nav: Any, docs_dir: Path) -> Any:
    """The nav without entries for absent optional pages (and without sections left empty)."""
    if isinstance(nav, list):
        kept = [_prune(item, docs_dir) for item in nav]
        return [item for item in kept if item is not None]
    if isinstance(nav, dict):
        out = {}
        for title, value in nav.items():
            pruned = _prune(value, docs_dir)
            if pruned not in (None, []):
                out[title] = pruned
        return out or None
    if isinstance(nav, str) and nav in OPTIONAL_PAGES and not (docs_dir / nav).is_file():
        _absent.add(nav)
        return None
    return nav


def on_config(config: Any) -> Any:
    """Drop nav entries of optional pages that do not exist yet."""
    _absent.clear()
    config["nav"] = _prune(config["nav"], Path(config["docs_dir"]))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Turn links to absent optional pages into their plain text (other broken links still fail)."""
    page_dir = Path(page.file.src_uri).parent

    def unlink(m: re.Match[str]) -> str:
        target = _normalise((page_dir / m.group(2)).as_posix())
        return m.group(1) if target in _absent else m.group(0)

    return _LINK.sub(unlink, markdown)


def _normalise(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)
