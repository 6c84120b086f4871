"""Writes the report: Markdown beside its PNGs, and one self-contained HTML page with the same content."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Section:
    """A heading, paragraphs, tables and figures, in that order; ``appendix`` sections come after the rest."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[pd.DataFrame] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    preformatted: str | None = None
    appendix: bool = False


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


APPENDIX = Section("Appendix", ["The evidence behind the sections above: verification, how far to trust the "
                                 "timings, traces, what did not run, the machines."])
"""The heading between the body and the appendix sections (which keep their own titles)."""


def _ordered(sections: list[Section]) -> list[tuple[str, Section]]:
    """Each section with its heading: the body, then the Appendix heading and the appendix's sections."""
    body = [(s.title, s) for s in sections if not s.appendix]
    rest = [(s.title, s) for s in sections if s.appendix]
    return body + ([(APPENDIX.title, APPENDIX)] if rest else []) + rest


def write_markdown(title: str, sections: list[Section], path: Path, banner: str | None = None) -> None:
    lines = [f"# {title}", ""]
    if banner:
        lines += [f"> **{banner}**", ""]
    for heading, s in _ordered(sections):
        lines += [f"## {heading}", ""]
        for p in s.paragraphs:
            lines += [p, ""]
        for t in s.tables:
            lines += [markdown_table(t), ""]
        if s.preformatted:
            lines += ["```", s.preformatted.rstrip(), "```", ""]
        for f in s.figures:
            lines += [f"![{f.stem}]({f.name})", ""]
    path.write_text("\n".join(lines))


def inline(text: str) -> str:
    """A paragraph's Markdown as HTML: escaped, with its `code` and **bold**."""
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def body_words(markdown: str) -> int:
    """Words before the appendix, tables and figures included (what a reader scrolls through first)."""
    head = markdown.split("\n## Appendix", 1)[0]
    return len(re.findall(r"[A-Za-z0-9][\w.'/%-]*", head))


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;line-height:1.4}"
    "h1{font-size:1.5em;margin:.3em 0}.banner{background:#fde8e8;border-left:4px solid firebrick;padding:.4em .8em;"
    "font-weight:600}.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font-size:13px;"
    "margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px}th{background:#f3f3f3}img{max-width:100%;"
    "height:auto}pre{background:#f6f6f6;padding:1em;overflow:auto}code{overflow-wrap:anywhere;"
    "background:#f3f3f3;padding:0 2px}p{overflow-wrap:anywhere}"
)


def write_html(title: str, sections: list[Section], path: Path, banner: str | None = None) -> None:
    """One file with the images inlined, so it can be mailed or attached as it is; wide tables scroll in a box."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    if banner:
        body.append(f'<p class="banner">{inline(banner)}</p>')
    for heading, s in _ordered(sections):
        anchor = re.sub(r"[^a-z0-9]+", "-", s.title.lower()).strip("-")
        body.append(f'<h2 id="{anchor}">{html.escape(heading)}</h2>')
        body += [f"<p>{inline(p)}</p>" for p in s.paragraphs]
        body += [f'<div class="scroll">{t.to_html(index=False, float_format=_cell, na_rep="", border=0)}</div>'
                 for t in s.tables]
        if s.preformatted:
            body.append(f"<pre>{html.escape(s.preformatted)}</pre>")
        for f in s.figures:
            data = base64.b64encode(f.read_bytes()).decode()
            body.append(f'<p><img alt="{f.stem}" src="data:image/png;base64,{data}"></p>')
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )
