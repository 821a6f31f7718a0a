"""Markdown writer for report blocks (:mod:`analysis.render_format`); images are linked PNG files."""

from __future__ import annotations

from tokenswarm.analysis.render_format import Block


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], image_paths: dict[str, str]) -> str:
    """Markdown text; ``image_paths`` maps image names to paths relative to the .md file."""
    out: list[str] = []
    for blk in blocks:
        kind = blk[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + blk[1])
        elif kind == "p":
            out.append(blk[1])
        elif kind == "banner":
            mark = {"red": "**[!] ", "yellow": "**[warning] ", "green": "**"}[blk[1]]
            out.append(f"> {mark}{blk[2]}**")
        elif kind == "list":
            out.append("\n".join(f"- {_cell(item)}" for item in blk[1]))
        elif kind == "table":
            headers, rows = blk[1], blk[2]
            lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "img" and blk[1] in image_paths:
            out.append(f"![{blk[2]}]({image_paths[blk[1]]})")
    return "\n\n".join(out) + "\n"
