"""Plain helpers shared by the tests (fixtures live in conftest.py)."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tests/support/helpers.py
SHARED_CASES = REPO.parent / "shared" / "cases"
_beside_python = Path(sys.executable).parent / "flowctl"
#: The installed console script of the venv the tests run in.
FLOWCTL_EXE = str(_beside_python if _beside_python.exists() else REPO / ".venv" / "bin" / "flowctl")

#: A minimal valid project: begin (choice) -> done (succeed).
MINIMAL = {
    "states/begin.yaml": "id: begin\ntype: choice\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/flow.yaml": "flow: flow\nversion: 1\nstart: begin\ntransitions:\n  - from: begin\n    to: done\n",
}


class Link(str):
    """A value for :func:`write_project`: make the file a symbolic link to this path."""


def write_project(root: Path, files: dict) -> Path:
    """Write ``{relative path: text|bytes|None}`` under ``root`` and return ``root``.

    Paths without a leading ``orchestration/`` get it prepended; ``None`` skips the entry (so a
    test can drop a file of a base project), a :class:`Link` makes a symbolic link. Text is dedented and its leading newline dropped, so
    line numbers in assertions are the lines of the dedented text.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "orchestration").mkdir(exist_ok=True)
    for rel, content in files.items():
        if content is None:
            continue
        rel = rel if rel.startswith("orchestration/") else f"orchestration/{rel}"
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Link):
            target.symlink_to(content)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
    return root




def problems(root: Path, *, import_check: bool = False):
    """Every diagnostic of the project at ``root`` (load + validate)."""
    from flowctl.definition.loader import load_project
    from flowctl.check.checks import validate

    return validate(load_project(root), import_entrypoints=import_check)


def of(diags, code: str):
    """The diagnostics with ``code``."""
    return [d for d in diags if d.code == code]


def one(diags, code: str):
    """The single diagnostic with ``code`` (fails the test if there are none or several)."""
    found = of(diags, code)
    assert len(found) == 1, f"expected one {code}, got {[(d.code, d.location, d.message) for d in diags]}"
    return found[0]


def where(d) -> tuple:
    """``(file, line, column)`` of a diagnostic."""
    return (d.file, d.line, d.column)


def load_sql_dump(path: Path, db_url: str) -> None:
    """Load an SQLite ``.dump`` of a run store (``tests/data/store_v*.sql``) into ``db_url``: an
    SQLite file, or an empty PostgreSQL database (the gate log's id becomes SERIAL there)."""
    text = Path(path).read_text()
    if db_url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(db_url[len("sqlite:///"):])
        conn.executescript(text)
        conn.close()
        return
    import psycopg

    text = text.replace("CREATE TABLE flowctl_gate_log (\n\tid INTEGER NOT NULL,", "CREATE TABLE flowctl_gate_log (\n\tid SERIAL NOT NULL,")
    with psycopg.connect("postgresql://" + db_url.split("://", 1)[1], autocommit=True) as conn:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
        for statement in [s for s in text.split(";\n") if s.strip()]:
            conn.execute(statement)
