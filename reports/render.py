"""Writes the report: Markdown beside its PNGs, and one self-contained HTML page with the same content."""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Section:
    """A heading, paragraphs, tables and figures, in that order."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[pd.DataFrame] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    preformatted: str | None = None


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(_cell(v).replace("|", "/") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def write_markdown(title: str, sections: list[Section], path: Path) -> None:
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        for p in s.paragraphs:
            lines += [p, ""]
        for t in s.tables:
            lines += [markdown_table(t), ""]
        if s.preformatted:
            lines += ["```", s.preformatted.rstrip(), "```", ""]
        for f in s.figures:
            lines += [f"![{f.stem}]({f.name})", ""]
    path.write_text("\n".join(lines))


def write_html(title: str, sections: list[Section], path: Path) -> None:
    """One file with the images inlined, so it can be mailed or attached as it is."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        body += [f"<p>{html.escape(p)}</p>" for p in s.paragraphs]
        body += [t.to_html(index=False, float_format=_cell, na_rep="", border=0) for t in s.tables]
        if s.preformatted:
            body.append(f"<pre>{html.escape(s.preformatted)}</pre>")
        for f in s.figures:
            data = base64.b64encode(f.read_bytes()).decode()
            body.append(f'<p><img alt="{f.stem}" src="data:image/png;base64,{data}"></p>')
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}"
        "th{background:#f3f3f3}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}"
    )
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )
