"""Rendering diagnostics: ``text`` (grouped per file), ``json``, ``github`` and ``sarif``.

Each renderer takes ``(diagnostics, display)`` where ``display(d)`` gives the path to print for a
diagnostic, and returns the whole output as a string.
"""
from __future__ import annotations

import json

from flowctl.diagnostics import CODES, ERROR


def summary(diags) -> str:
    errors = sum(d.severity == ERROR for d in diags)
    warnings = len(diags) - errors
    files = len({d.file for d in diags})
    if not diags:
        return "no problems found"
    return f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} in {files} file{'s' * (files != 1)}"


def text(diags, display, *, color: bool = False, checked: int = 0) -> str:
    import click

    def style(s, **kw):
        return click.style(s, **kw) if color else s

    lines = []
    current = None
    for d in diags:
        path = display(d)
        if path != current:
            if current is not None:
                lines.append("")
            lines.append(style(path, bold=True))
            current = path
        sev = style(d.severity, fg="red" if d.severity == ERROR else "yellow", bold=True)
        lines.append(f"{path}:{d.line}:{d.column}: {sev} {d.code} {d.message} [{d.slug}]")
        if d.hint:
            lines.append(f"    hint: {d.hint}")
    if lines:
        lines.append("")
    tail = f" ({checked} files checked)" if checked else ""
    lines.append(summary(diags) + tail)
    return "\n".join(lines)


def as_json(diags, display) -> str:
    items = [dict(d.as_dict(), file=display(d)) for d in diags]
    errors = sum(d.severity == ERROR for d in diags)
    return json.dumps({"diagnostics": items, "errors": errors, "warnings": len(diags) - errors}, indent=2)


def _gh_escape(s: str, prop: bool = False) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        s = s.replace(":", "%3A").replace(",", "%2C")
    return s


def github(diags, display) -> str:
    """GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per diagnostic."""
    out = []
    for d in diags:
        level = "error" if d.severity == ERROR else "warning"
        msg = d.message + (f" (hint: {d.hint})" if d.hint else "")
        out.append(f"::{level} file={_gh_escape(display(d), True)},line={d.line},col={d.column},"
                   f"title={_gh_escape(d.code + ' ' + d.slug, True)}::{_gh_escape(msg)}")
    return "\n".join(out)


def sarif(diags, display) -> str:
    """SARIF 2.1.0, as GitHub code scanning loads it."""
    from flowctl import __version__

    used = sorted({d.code for d in diags})
    rules = [{"id": code, "name": CODES[code][0],
              "shortDescription": {"text": CODES[code][0].replace("-", " ")},
              "defaultConfiguration": {"level": "error" if CODES[code][1] == ERROR else "warning"}}
             for code in used if code in CODES]
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for d in diags:
        result = {
            "ruleId": d.code,
            "level": "error" if d.severity == ERROR else "warning",
            "message": {"text": d.message + (f" Hint: {d.hint}" if d.hint else "")},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": display(d).replace("\\", "/")},
                "region": {"startLine": d.line, "startColumn": d.column}}}],
        }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        results.append(result)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "flowctl", "version": __version__,
                                      "informationUri": "https://github.com/flowctl/flowctl", "rules": rules}},
                  "results": results}],
    }
    return json.dumps(doc, indent=2)


RENDERERS = {"json": as_json, "github": github, "sarif": sarif}
