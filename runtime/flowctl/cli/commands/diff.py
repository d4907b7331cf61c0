"""``flowctl diff [BASE [HEAD]]``: the semantic diff of two versions of the orchestration tree.

BASE and HEAD are each a git revision (read from git objects; the working tree is not touched)
or a folder holding ``orchestration/``. Default BASE: the merge base of HEAD with the default
branch; default HEAD: the working tree. Exit 0 (changes and risks or not), 1 with
``--fail-on-risk`` when a change is flagged as a risk, 2 when unusable.
"""
from __future__ import annotations

import sys
from pathlib import Path

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK

FORMATS = ("text", "markdown", "json", "svg")


def _is_folder(spec: str) -> bool:
    path = Path(spec)
    return path.is_dir() and ((path / "orchestration").is_dir() or path.name == "orchestration")


class Sides:
    """Loads each side of the diff: a folder, a git revision, or (None) the working tree."""

    def __init__(self, root) -> None:
        from flowctl.errors import ProjectError
        from flowctl.definition.loader import find_root

        try:
            self.project_root = find_root(root) if root else find_root()
        except ProjectError:
            if root:
                raise
            self.project_root = None  # orchestration/ may exist only in git history
        self._repo = None

    def repo(self):
        from flowctl.definition import gitsource

        if self._repo is None:
            start = self.project_root or Path.cwd()
            top = gitsource.toplevel(start)
            self._repo = (top, gitsource.project_prefix(top, self.project_root or top))
        return self._repo

    def load(self, spec: str | None):
        """(Project, label) for ``spec``."""
        from flowctl.definition import gitsource
        from flowctl.errors import UsageError
        from flowctl.definition.loader import find_root, load_files, load_project

        if spec is None:
            if self.project_root is None:
                find_root()  # raises the ProjectError with its hint
            return load_project(self.project_root), "working tree"
        if _is_folder(spec):
            return load_project(find_root(spec)), spec
        try:
            top, prefix = self.repo()
        except UsageError as exc:  # not in a repository: say both readings of spec failed
            raise UsageError(f"'{spec}' is not a folder holding orchestration/, and {exc.message}", hint=exc.hint) from None
        commit = gitsource.resolve(top, spec)
        files = gitsource.read_revision(top, commit, prefix)
        label = commit[:7] if commit.startswith(spec) else f"{spec} ({commit[:7]})"
        return load_files(files, self.project_root or top), label

    def default_base(self):
        from flowctl.definition import gitsource
        from flowctl.definition.loader import load_files

        top, prefix = self.repo()
        commit, label = gitsource.default_base(top)
        return load_files(gitsource.read_revision(top, commit, prefix), self.project_root or top), f"{label} ({commit[:7]})"


def run(base, head, root, fmt: str, output, replay=None, fail_on_risk: bool = False) -> int:
    from flowctl.diff.core import diff_projects
    from flowctl.diff.render import RENDERERS
    from flowctl.errors import UsageError
    from flowctl.cli.commands.graph import emit

    if root and not Path(root).exists():
        raise UsageError(f"no such folder: {root}")
    sides = Sides(root)
    base_project, base_label = sides.load(base) if base is not None else sides.default_base()
    head_project, head_label = sides.load(head)
    diff = diff_projects(base_project, head_project, base_label, head_label)
    if fmt == "text":
        result = RENDERERS["text"](diff, color=not output and sys.stdout.isatty())
    else:
        result = RENDERERS[fmt](diff)
    if replay:  # --replay N (issue 7, flowctl.testing.replay): which of the last N recorded runs take another path under HEAD
        from flowctl.testing.replay import add_to_diff

        result = add_to_diff(result, fmt, sides.project_root or Path.cwd(), head_project, head_label, replay)
    emit(result, output)
    if fail_on_risk and head_project.rejected:  # (new-user finding: a policy of HEAD that did not load passed)
        import click

        click.echo(f"--fail-on-risk: {len(head_project.rejected)} file(s) of {head_label} do not load, so the diff "
                   "cannot say they carry no risk (flowctl validate says why)", err=True)
        return EXIT_FAILED
    return EXIT_FAILED if fail_on_risk and diff.risks() else EXIT_OK
