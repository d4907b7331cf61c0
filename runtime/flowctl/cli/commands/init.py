"""``flowctl init [FOLDER] [--template NAME]``: scaffold a project (:mod:`flowctl.scaffold`).

Exit 0 written; 2 the folder already has orchestration/ or the template is unknown (nothing written).
The next steps it prints spell ``flowctl`` as it was invoked when it is not on PATH
(``../.venv/bin/flowctl`` after ``.venv/bin/flowctl init my-project``), so they can be pasted."""
from __future__ import annotations

import os
import shutil
import sys

import click

from flowctl.cli.commands import EXIT_OK


def program(folder: str, argv0: str | None = None, on_path: str | None = None) -> str:
    """How to invoke this flowctl from inside ``folder``: ``flowctl`` when that is on PATH (or
    flowctl was not run as a script named flowctl); else ``argv0`` made relative to ``folder`` (an
    absolute path when it was absolute or ``folder`` is outside the current folder, e.g.
    ``/tmp/my-project``). ``argv0`` and ``on_path`` default to ``sys.argv[0]`` and
    ``shutil.which("flowctl")``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    on_path = shutil.which("flowctl") if on_path is None else on_path
    if on_path or not os.path.basename(argv0).startswith("flowctl") or os.sep not in argv0:
        return "flowctl"
    if os.path.isabs(argv0):
        return argv0
    target, where = os.path.abspath(argv0), os.path.abspath(folder or ".")
    if os.path.relpath(where).split(os.sep)[0] == "..":
        return target
    rel = os.path.relpath(target, where)
    return rel if os.sep in rel else os.path.join(".", rel)


def enclosing_project(folder: str):
    """The root of a project ``folder`` would be nested in (the nearest ancestor with
    ``orchestration/``), or None."""
    from pathlib import Path

    here = Path(folder or ".").resolve()
    return next((p for p in here.parents if (p / "orchestration").is_dir()), None)


def run(folder: str, template: str) -> int:
    from flowctl.scaffold import init, next_steps

    outer = enclosing_project(folder)
    written = init(folder, template)
    click.echo(f"created a flowctl project ({template} template) in {folder}: {len(written)} files")
    if outer is not None:  # (new-user finding: init in a project's subfolder nested a project silently)
        click.echo(f"note: {folder} is inside the flowctl project at {outer}: commands run in {folder} (or below it) "
                   f"now find the new project, not that one (--root {outer} reaches it)", err=True)
    for rel in written:
        click.echo(f"  {rel.as_posix()}")
    steps = next_steps(template, program(folder))
    if steps:
        click.echo("\nnext:" + (f"\n  cd {folder}" if folder not in (".", "") else ""))
        for cmd, what in steps:
            click.echo(f"  # {what}\n  {cmd}")
    return EXIT_OK
