"""``flowctl validate``: load, check, report. Exit 0 clean (warnings pass), 1 errors, 2 unusable."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.diagnostics import ERROR


def run(paths, root, fmt: str, strict: bool, import_check: bool) -> int:
    from flowctl.check import render as report
    from flowctl.cli.commands._common import tools_print_to_stderr
    from flowctl.definition.loader import find_root, load_project
    from flowctl.check.checks import validate

    targets = [Path(p) for p in paths] or [Path(root) if root else Path.cwd()]
    for t in targets:
        if not t.exists():
            from flowctl.errors import UsageError

            raise UsageError(f"no such file or folder: {t}")
    groups: dict = {}
    for t in targets:
        r = find_root(root or t)
        only = None if t.is_dir() else t.resolve()
        groups.setdefault(r, []).append(only)
    all_diags = []
    checked = 0
    cwd = Path.cwd()
    for r, selections in groups.items():
        project = load_project(r)
        checked += len(project.documents)
        with tools_print_to_stderr(fmt):
            diags = validate(project, import_entrypoints=import_check)
        if None not in selections:
            wanted = {str(s) for s in selections}
            diags = [d for d in diags if str((r / d.file).resolve()) in wanted]
        all_diags.extend((r, d) for d in diags)

    def display(d, _map={id(d): r for r, d in all_diags}):
        full = _map[id(d)] / d.file
        rel = os.path.relpath(full, cwd)
        return rel if not rel.startswith(".." + os.sep + "..") else str(full)

    diags = [d for _, d in all_diags]
    if fmt == "text":
        click.echo(report.text(diags, display, color=sys.stdout.isatty(), checked=checked))
    else:
        click.echo(report.RENDERERS[fmt](diags, display))
    failing = any(d.severity == ERROR for d in diags) or (strict and diags)
    return EXIT_FAILED if failing else EXIT_OK
