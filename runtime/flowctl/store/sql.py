"""The run store's entry point: :func:`open_store`, and the names other packages import from here.

The store itself is split by job: :mod:`flowctl.store.core` (``SqlStore``: schema, commits,
runs, definitions, the gate's counters), :mod:`flowctl.store.queue` (claims, leases, workers,
limits), :mod:`flowctl.store.history` (listings, due runs, stats), :mod:`flowctl.store.memory`
(``MemoryStore``), :mod:`flowctl.store.records` (row shapes, statuses, ``LeaseLost``),
:mod:`flowctl.store.url` (store addresses) and :mod:`flowctl.store.protocol` (what a store offers:
``Store``, and ``QueueStore`` for the SQL store only).
"""
from __future__ import annotations

from pathlib import Path

from flowctl.errors import StoreError
from flowctl.store.core import SCHEMA_VERSION, SqlStore
from flowctl.store.memory import MemoryStore
from flowctl.store.records import FINAL, RUN_ID_CHARS, STATUSES, LeaseLost, review_due_at
from flowctl.store.url import normalise_url, safe_url as _safe

__all__ = ["FINAL", "RUN_ID_CHARS", "SCHEMA_VERSION", "STATUSES", "LeaseLost", "MemoryStore", "SqlStore",
           "normalise_url", "open_store", "review_due_at", "_safe"]


def open_store(url: str | None = None, root: Path | None = None, *, create: bool = True,
               pool_size: int | None = None):
    """Open the store at ``url`` (see :func:`normalise_url`), creating or upgrading its tables.

    With ``create=False`` (read-only commands: runs, trace, stats …) a SQLite file that does not
    exist is an error instead of a new empty store. A SQLite file is only created in an existing
    folder, except the default ``.flowctl/``. ``pool_size``: connections kept open (a worker
    needs one per concurrent run plus its heartbeat). Raises :class:`StoreError`.
    """
    default = not url
    url = normalise_url(url, root)
    if url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if path.name and str(path) != ":memory:":
            if not path.exists() and not create:
                raise StoreError(f"no run store at {path}", hint="no runs yet? start one with: flowctl run FLOW"
                                 if default else "check --db / FLOWCTL_DB")
            if not path.parent.exists():
                if not default:
                    raise StoreError(f"folder {path.parent} does not exist", hint="create it, or fix --db / FLOWCTL_DB")
                path.parent.mkdir(parents=True, exist_ok=True)
    return SqlStore(url, pool_size=pool_size)
