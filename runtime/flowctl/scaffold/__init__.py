"""``flowctl init``: a new project from a template that validates, runs and has golden cases.

Templates live in ``flowctl/scaffold/templates/<name>/`` (package data): an ``orchestration/``
tree and ``gitignore.txt`` (written as ``.gitignore`` unless one exists). :func:`init` copies a
template into a folder; it refuses (:class:`~flowctl.errors.UsageError`, nothing written) when the
folder already holds an ``orchestration/`` folder or the template is unknown.
"""
from __future__ import annotations

import os
from pathlib import Path

from flowctl.errors import UsageError

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
SKIP = {"__pycache__"}

# What to try first, per template: (command, what it shows).
NEXT_STEPS = {
    "basic": [
        ("flowctl validate --import-check", "checks every file and imports every tool (what CI should run)"),
        ("flowctl test --min-coverage 100", "runs the golden cases in orchestration/tests/"),
        ("flowctl run signup --input '{\"email\": \"ada@example.com\", \"plan\": \"team\"}'", "a real run"),
        ("flowctl trace RUN", "what that run did, step by step"),
        ("flowctl graph signup -o signup.svg", "the flow drawn"),
    ],
    "agent": [
        ("flowctl validate --import-check", "checks every file and the prompts' names, and imports every tool"),
        ("flowctl test --min-coverage 100", "the golden cases mock each model reply"),
        ("flowctl run ticket_triage --input '{\"customer\": \"ada@example.com\", \"order_id\": \"A-1001\", "
         "\"text\": \"The jacket arrived torn.\"}'", "a run on the scripted (fake) model profile"),
        ("flowctl trace RUN", "model calls, the agent's tool calls, the gate's decisions"),
        ("FLOWCTL_MODEL_PROFILE=live OPENAI_BASE_URL=... OPENAI_API_KEY=... flowctl run ticket_triage ...",
         "the same against a real OpenAI-compatible server (pip install 'flowctl[openai]')"),
    ],
}


def next_steps(template: str, program: str = "flowctl") -> list[tuple[str, str]]:
    """:data:`NEXT_STEPS` of ``template`` (``[]`` for one without) with each ``flowctl`` command
    spelled ``program`` (e.g. ``../.venv/bin/flowctl`` where ``flowctl`` is not on PATH)."""
    import re

    return [(re.sub(r"(^|(?<= ))flowctl(?= )", lambda m: program, cmd), what) for cmd, what in NEXT_STEPS.get(template, [])]


def templates() -> list[str]:
    """The names of the templates shipped with flowctl, sorted."""
    return sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir() and p.name not in SKIP)


def _beside(root: Path) -> str:
    """A new folder next to ``root``, written as ``root`` was given (new-user finding: for
    ``/tmp/proj`` the hint said ``proj-2``, a folder inside the current one)."""
    import os

    beside = root.resolve().parent / f"{root.resolve().name or 'project'}-2"
    return str(beside) if root.is_absolute() else os.path.relpath(beside)


def init(target: str | Path, template: str = "basic") -> list[Path]:
    """Copy ``template`` into ``target`` (created when missing). Returns the files written, as paths
    relative to ``target``. Raises ``UsageError`` for an unknown template or when ``target`` already
    has ``orchestration/`` (nothing is written then)."""
    names = templates()
    if template not in names:
        raise UsageError(f"no template '{template}'", hint=f"choose one of: {', '.join(names)}")
    root = Path(target)
    if (root / "orchestration").exists():
        raise UsageError(f"{root / 'orchestration'} already exists; nothing was written",
                         hint="run flowctl init in an empty folder, or give a new one: flowctl init "
                              f"{_beside(root)}")
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is a file, not a folder")
    source = TEMPLATES_DIR / template
    plan = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_dir() or SKIP & set(rel.parts) or path.suffix == ".pyc":
            continue
        dest = Path(".gitignore") if rel == Path("gitignore.txt") else rel
        if dest == Path(".gitignore") and (root / dest).exists():
            continue
        plan.append((path, dest))
    if root.is_symlink() and not root.exists():
        raise UsageError(f"{root} is a link to {os.readlink(root)}, which does not exist; nothing was written",
                         hint="give a real folder, or a new name")
    written = []
    try:
        for path, dest in plan:
            out = root / dest
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(path.read_bytes())
            written.append(dest)
    except OSError as exc:
        for dest in reversed(written):  # nothing half-written: take back what this call wrote
            (root / dest).unlink(missing_ok=True)
        raise UsageError(f"cannot write the project into {root}: {exc.strerror or exc}"
                         f"{' (' + exc.filename + ')' if exc.filename else ''}; nothing was kept",
                         hint="give a folder you can write to") from None
    return written


__all__ = ["init", "templates", "NEXT_STEPS", "TEMPLATES_DIR"]
