"""Self-contained HTML writer: inline CSS, plots embedded as base64 PNG, no external resources."""

from __future__ import annotations

import base64
import html

from tokenswarm.analysis.render_format import Block

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:1.6em}
h3{font-size:1.05em}
table{border-collapse:collapse;margin:8px 0 16px 0;font-size:12px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f3f3f3}td:first-child,td:nth-child(2){text-align:left}
.banner{padding:10px 14px;margin:10px 0;border-radius:4px;font-weight:600}
.red{background:#c62828;color:#fff}.yellow{background:#fff3cd;color:#5c4400;border:1px solid #e0c060}
.green{background:#e8f5e9;color:#1b5e20}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
figcaption{font-size:12px;color:#555}
"""


def to_html(blocks: list[Block], images: dict[str, bytes], title: str) -> str:
    """One HTML page; images are ``data:image/png;base64`` URIs so the file opens offline."""
    e = html.escape
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{_CSS}</style></head><body>"]
    for blk in blocks:
        kind = blk[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{e(blk[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{e(blk[1])}</p>")
        elif kind == "banner":
            out.append(f"<div class='banner {blk[1]}'>{e(blk[2])}</div>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{e(str(i))}</li>" for i in blk[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in blk[1])
            body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in blk[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img" and blk[1] in images:
            data = base64.b64encode(images[blk[1]]).decode("ascii")
            out.append(f"<figure><img alt='{e(blk[2])}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{e(blk[2])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
