"""Finding a project's root (the folder holding ``orchestration/``) without loading anything: what
the commands that read only the run store need (the store's default path is relative to it)."""
from __future__ import annotations

import os
from pathlib import Path

from flowctl.errors import ProjectError

#: folder -> kind of file it holds
FOLDERS = {"states": "state", "transitions": "flow", "contracts": "contract", "policies": "policy"}


def find_root(start: str | os.PathLike | None = None) -> Path:
    """The folder holding ``orchestration/``: ``start`` itself, its parent if ``start`` *is* the
    orchestration folder, or the nearest ancestor of it that has one.

    Raises :class:`ProjectError` when there is none.
    """
    here = Path(start or os.getcwd()).resolve()
    if here.is_file():
        here = here.parent
    if here.name == "orchestration" and any((here / f).is_dir() for f in FOLDERS):
        return here.parent
    for candidate in (here, *here.parents):
        if (candidate / "orchestration").is_dir():
            return candidate
    raise ProjectError(
        f"no orchestration/ folder in {here} or any parent",
        hint="run flowctl inside your repository, or pass --root PATH",
    )
