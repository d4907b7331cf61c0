"""A run's events read in batches: keyset pagination on ``seq``, so a 100,000-step run's log is
never held whole (``flowctl trace``, ``flowctl audit verify``; issue 17).

A store that can page (``events_page(run_id, after_seq, limit)``: the SQL store, its DBAPI reader
:mod:`flowctl.store.reader`, and :class:`~flowctl.store.memory.MemoryStore`) is read
:data:`BATCH` events at a time; any other store gives its whole list through ``events``.
"""
from __future__ import annotations

from typing import Iterator

#: events per query: big enough that a query costs little next to its rows, small enough that a
#: batch of events with large data stays a few megabytes
BATCH = 2000


def iter_events(store, run_id: str, batch: int | None = None) -> Iterator[dict]:
    """The events of ``run_id`` in ``seq`` order (dicts as ``store.events`` returns them), read
    ``batch`` (default :data:`BATCH`) at a time: each query asks for the ``batch`` events after the last ``seq`` seen. An
    unknown run gives nothing. Raises what the store raises (:class:`~flowctl.errors.StoreError`)."""
    page = getattr(store, "events_page", None)
    if page is None:
        yield from store.events(run_id)
        return
    batch = batch or BATCH
    after = 0
    while True:
        rows = page(run_id, after, batch)
        yield from rows
        if len(rows) < batch:
            return
        after = rows[-1]["seq"]
