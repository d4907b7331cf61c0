"""``flowctl graph FLOW``: draw one flow as DOT, SVG, PNG or mermaid. Exit 0, or 2 when unusable."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from flowctl.cli.commands import EXIT_OK

FORMATS = ("dot", "svg", "png", "mermaid")
SUFFIXES = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png", ".mmd": "mermaid", ".mermaid": "mermaid"}


def pick_format(fmt: str | None, output: str | None, default: str) -> str:
    """``fmt`` if given, else the one ``output``'s suffix names, else ``default``."""
    from flowctl.errors import UsageError

    if fmt:
        return fmt
    if not output:
        return default
    suffix = Path(output).suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"cannot tell the format from '{output}'", hint="pass --format, or name the file .dot, .gv, .svg, .png, .mmd or .mermaid")
    return SUFFIXES[suffix]


def emit(result: str | bytes, output: str | None) -> None:
    """Write ``result`` to ``output`` (a file) or stdout; binary output is refused on a terminal."""
    from flowctl.errors import UsageError

    if output:
        path = Path(output)
        if path.parent and not path.parent.exists():
            raise UsageError(f"no such folder: {path.parent}")
        if isinstance(result, bytes):
            path.write_bytes(result)
        else:
            path.write_text(result, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
        return
    if isinstance(result, bytes) and sys.stdout.isatty():
        raise UsageError("PNG is binary and stdout is a terminal", hint="pass -o FILE.png, or redirect: > graph.png")
    click.echo(result, nl=False)


def run(flow: str, root, fmt: str | None, output: str | None, show_data: bool = False) -> int:
    from flowctl.errors import UsageError
    from flowctl.graph.flowgraph import build_graph, render, with_data
    from flowctl.definition.loader import load_project

    if root and not Path(root).exists():
        raise UsageError(f"no such folder: {root}")
    fmt = pick_format(fmt, output, "dot")
    project = load_project(root)
    graph = build_graph(project, flow)
    if show_data:
        graph = with_data(graph, project)
    emit(render(graph, fmt), output)
    return EXIT_OK
