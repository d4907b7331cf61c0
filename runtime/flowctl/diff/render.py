"""Renderers of a :class:`~flowctl.diff.core.ProjectDiff`: ``text``, ``markdown``, ``json`` (and
``svg`` through :mod:`flowctl.diff.graph`). Each returns a string; :data:`RENDERERS` maps a
format name to its function.

* text — one line per change, ``+`` added, ``-`` removed, ``~`` changed (as terraform plan), the
  field changes indented under it, ``!`` for risks, then the affected flows.
* markdown — for a pull-request comment: a hidden marker (:data:`MARKER`) so CI can find and
  update the one comment, a one-line count, the risks, a table of changes (symbols *and* coloured
  circles), the affected flows, and inside ``<details>`` a mermaid flowchart per changed flow
  (changed states plus one hop of context). Above GitHub's mermaid limits (:data:`MERMAID_MAX_EDGES`
  edges or :data:`MERMAID_MAX_CHARS` characters) the charts are left out with a note, and the
  table is cut to keep the comment under :data:`COMMENT_MAX_CHARS`.
* json — :meth:`ProjectDiff.to_json`, the schema documented in :mod:`flowctl.diff.core`.
"""
from __future__ import annotations

import json
import re

from flowctl.diff.core import ProjectDiff

MARKER = "<!-- flowctl-diff -->"
MERMAID_MAX_EDGES = 500
MERMAID_MAX_CHARS = 50_000
COMMENT_MAX_CHARS = 60_000  # GitHub refuses comments over 65,536 characters
VALUE_WIDTH = 160
_COLOUR = {"+": "green", "-": "red", "~": "yellow", "!": "magenta"}


def count_line(diff: ProjectDiff) -> str:
    """``2 added, 1 removed, 4 changed; 2 risks; 1 flow affected`` (or ``no changes``)."""
    if diff.empty:  # files that do not load were left out: "no changes" would be a claim about them too
        return "no changes among the files that load" if diff.warnings else "no changes"
    c = diff.counts()
    parts = [f"{c['added']} added, {c['removed']} removed, {c['changed']} changed"]
    risks = len(diff.risks())
    if risks:
        parts.append(f"{risks} risk{'s' * (risks != 1)}")
    if diff.affected:
        n = len(diff.affected)
        parts.append(f"{n} flow{'s' * (n != 1)} affected")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- text
def text(diff: ProjectDiff, color: bool = False) -> str:
    def paint(line: str, symbol: str) -> str:
        if not color:
            return line
        import click

        return click.style(line, fg=_COLOUR.get(symbol))

    out = [f"flowctl diff {diff.base_label} → {diff.head_label}: {count_line(diff)}"]
    for w in diff.warnings:
        out.append(f"warning: {w}")
    if diff.changes:
        out.append("")
    for c in diff.changes:
        title = c.title if c.kind == "contract" or not c.summary else f"{c.title} ({c.summary})"
        out.append(paint(f"{c.symbol} {title}", c.symbol))
        for f in c.fields:
            out.append(f"    {f.text()}")
        for r in c.risks:
            out.append(paint(f"    ! risk: {r.message}", "!"))
    if diff.affected:
        out += ["", "Flows affected:"]
        width = max(len(f) for f in diff.affected)
        for flow, via in diff.affected.items():
            out.append(f"  {flow.ljust(width)}  via {', '.join(via)}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- markdown
_ICON = {"added": "🟢 +", "removed": "🔴 −", "changed": "🟡 ~"}


def code(value: str) -> str:
    """``value`` as a markdown code span that survives backticks and table pipes."""
    value = str(value).replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _cut(text_: str, width: int = VALUE_WIDTH) -> str:
    return text_ if len(text_) <= width else text_[: width - 1] + "…"


def _row(c) -> str:
    name = c.title.split(" ", 1)[1]
    details = [code(_cut(f.text())) for f in c.fields]
    if c.summary and c.kind != "contract":
        details.insert(0, c.summary)
    if c.kind == "state" and c.flows:
        details.append("used by " + ", ".join(code(f) for f in c.flows))
    details += [f"⚠️ **risk:** {_escape(r.message)}" for r in c.risks]
    return f"| {_ICON[c.op]} | {c.kind} | {code(name)} | {'<br>'.join(details) or c.op} |"


def _escape(text_: str) -> str:
    return re.sub(r"([\\`*_<>|\[\]])", r"\\\1", str(text_))


def markdown(diff: ProjectDiff, *, svg_hint: str = "") -> str:
    """The PR comment. ``svg_hint``: a sentence pointing at the SVG (e.g. the artifact's name)."""
    from flowctl.diff.graph import mermaid_charts

    head = [MARKER, f"### flowctl diff {code(diff.base_label)} → {code(diff.head_label)}", "",
            f"**{count_line(diff)}**", ""]
    for w in diff.warnings:
        head += [f"> [!WARNING]\n> {_escape(w)}", ""]
    if diff.empty:
        return "\n".join(head + ["No change to flows, states, transitions, handlers, contracts or policies.", ""])
    risks = diff.risks()
    if risks:
        head += ["> [!CAUTION]", "> **Risks to review**"]
        head += [f"> - ⚠️ {_escape(r.message)}" for _c, r in risks]
        head.append("")
    tail = []
    if diff.affected:
        tail += ["**Flows affected:** " + "; ".join(
            f"{code(f)} (via {', '.join(via)})" for f, via in diff.affected.items()), ""]
    charts = mermaid_charts(diff)
    total_chars = sum(len(ch.text) for ch in charts)
    total_edges = sum(ch.edges for ch in charts)
    if charts and total_chars <= MERMAID_MAX_CHARS and total_edges <= MERMAID_MAX_EDGES:
        tail += ["<details><summary>Graph of the changed states (and one hop of context)</summary>", "",
                 "Legend: 🟢 `+` added · 🔴 `−` removed (dashed) · 🟡 `~` changed · grey: unchanged context", ""]
        for ch in charts:
            tail += [f"**flow {code(ch.flow)}**", "", "```mermaid", ch.text.rstrip("\n"), "```", ""]
        tail += ["</details>", ""]
    elif charts:
        tail += [f"_The graph ({total_edges} edges, {total_chars:,} characters) is above GitHub's mermaid limits "
                 f"({MERMAID_MAX_EDGES} edges, {MERMAID_MAX_CHARS:,} characters), so only the table is shown._", ""]
    if svg_hint:
        tail += [svg_hint, ""]
    table = ["| | Kind | Name | Details |", "|---|---|---|---|"]
    budget = COMMENT_MAX_CHARS - len("\n".join(head + tail)) - 200
    rows = [_row(c) for c in diff.changes]
    used = 0
    for i, row in enumerate(rows):
        if used + len(row) + 1 > budget:
            table.append(f"| … | | | {len(rows) - i} more changes not shown; see `flowctl diff --format text` |")
            break
        table.append(row)
        used += len(row) + 1
    return "\n".join(head + table + [""] + tail)


# ----------------------------------------------------------------------------- json
def json_text(diff: ProjectDiff) -> str:
    return json.dumps(diff.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"


def svg(diff: ProjectDiff) -> str:
    from flowctl.diff.graph import to_svg

    return to_svg(diff)


RENDERERS = {"text": text, "markdown": markdown, "json": json_text, "svg": svg}
