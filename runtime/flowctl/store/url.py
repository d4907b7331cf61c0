"""Store addresses: what ``--db`` / ``FLOWCTL_DB`` accept, and how they are shown.

``sqlite:///path/to/flowctl.db`` (the default: ``.flowctl/flowctl.db`` under the project root),
``postgresql://user@host/db`` (``postgres://`` too; driven by psycopg 3) and ``memory`` (the
in-memory store, nothing kept). Imports nothing heavy.
"""
from __future__ import annotations

from pathlib import Path

from flowctl.errors import StoreError


def normalise_url(url: str | None, root: Path | None = None) -> str:
    """``None`` -> the default SQLite file under ``root``; ``postgresql://`` -> psycopg 3 driver;
    ``sqlite:///path`` as is; ``memory`` -> the in-memory store. Anything else (a bare word, an
    unsupported scheme) raises :class:`StoreError`: a typo must not become a new empty store."""
    if not url:
        base = Path(root or ".") / ".flowctl" / "flowctl.db"
        return f"sqlite:///{base}"
    if url == "memory":
        return url
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///"):
        _refuse_sqlite_memory(url)
        return url
    if url.startswith("postgresql+psycopg://"):
        return url
    raise StoreError(f"unsupported store address {url!r}",
                     hint="use sqlite:///path/to/flowctl.db, postgresql://user@host/db, or memory")


def _refuse_sqlite_memory(url: str) -> None:
    """``sqlite:///`` (no path), ``sqlite:///:memory:`` and SQLite's other in-memory or temporary
    forms keep nothing once the process ends, while every command that takes ``--db`` promises a
    durable record: refused (``--db memory`` says plainly that nothing is kept)."""
    path, _, query = url[len("sqlite:///"):].partition("?")
    if path.strip() in ("", ":memory:") or path.startswith("file::memory:") or "mode=memory" in query:
        raise StoreError(f"{url!r} is an SQLite database in memory, which keeps nothing once the process ends; the run store must keep every run",
                         hint="use sqlite:///path/to/flowctl.db (or --db memory to keep nothing on purpose)")


def safe_url(url: str) -> str:
    """URL without a password, as the user writes it (``postgresql://``, not SQLAlchemy's
    ``postgresql+psycopg://``)."""
    if url.startswith("postgresql+psycopg://"):
        url = "postgresql://" + url[len("postgresql+psycopg://"):]
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}@{host}"
    return url
