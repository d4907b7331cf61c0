"""Runs listed page by page, newest first, with a cursor (``GET /v1/runs`` of ``flowctl serve``).

:func:`runs_page` returns at most ``limit`` runs (dicts as :meth:`Store.get_run` returns) ordered
by ``(created_at, id)`` descending, strictly after ``before`` — the ``(created_at, id)`` of the last
run of the previous page — so a page boundary is stable while new runs arrive. On an SQL store it
is one query on the version-5 indexes ``(status|flow, created_at, id)``; on a memory store a scan.
"""
from __future__ import annotations

from flowctl.store.records import run_dict


def runs_page(store, *, status: str | None = None, flow: str | None = None, before: tuple | None = None,
              limit: int = 50, top_level: bool = True) -> list:
    """See the module docstring. ``before``: ``(created_at seconds, run id)`` or None (the first page)."""
    if getattr(store, "engine", None) is None or getattr(store, "t", None) is None:
        rows = store.list_runs(status=status, flow=flow, limit=0, top_level=top_level)
        if before is not None:
            rows = [r for r in rows if (r["created_at"], r["id"]) < (before[0], before[1])]
        return rows[:limit]
    sa, r = store.sa, store.t.runs
    q = sa.select(r).order_by(r.c.created_at.desc(), r.c.id.desc()).limit(limit)
    if top_level:
        q = q.where(r.c.parent_id.is_(None))
    if status:
        q = q.where(r.c.status == status)
    if flow:
        q = q.where(r.c.flow == flow)
    if before is not None:
        at, run_id = float(before[0]), str(before[1])
        q = q.where(sa.or_(r.c.created_at < at, sa.and_(r.c.created_at == at, r.c.id < run_id)))
    with store._read() as conn:
        return [run_dict(row, store) for row in conn.execute(q).mappings()]


__all__ = ["runs_page"]
