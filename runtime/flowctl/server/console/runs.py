"""The Runs page: ``GET /console/runs`` [runs:read] — top-level runs newest first, filtered by flow,
status, time window and text in the id, a page at a time, their status kept live by htmx polling.

Query: ``flow``, ``status`` (one of the store's statuses; another is answered 400 naming them), ``window`` (``1h``, ``24h``, ``7d``,
``30d`` or empty: any time), ``q`` (text the id contains), ``cursor`` (the previous page's last
``(created_at, id)``, opaque). The rows come from :func:`flowctl.store.pages.runs_page` (one indexed
query per page of the store's ``(status|flow, created_at, id)`` indexes), so the page costs the
same with 100,000 runs stored as with 100; a ``q`` filter is a ``LIKE`` in the same query on an
SQL store (a scan of the creation-time index until a page matches), and on a memory store reads
further pages until it has a page's worth, at most :data:`SCAN` runs. ``GET /console/runs/rows`` is the table body alone (what
the page polls every few seconds while it is open, and what the filters swap in).
"""
from __future__ import annotations

import base64
import json

from flowctl.server import views
from flowctl.server.console.auth import page
from flowctl.server.console.web import message, render
from flowctl.store.pages import runs_page
from flowctl.store.records import STATUSES

PAGE = 25
#: runs read at most to fill one page when filtering by text in the id
SCAN = 5000
WINDOWS = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}


def cursor_out(row) -> str:
    return base64.urlsafe_b64encode(json.dumps([row["created_at"], row["id"]]).encode()).decode().rstrip("=")


def cursor_in(text: str):
    """``(created_at, id)`` of a cursor this page gave, or None (an unreadable one starts over)."""
    try:
        at, run_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(at, (int, float)) and not isinstance(at, bool) and isinstance(run_id, str) and len(run_id) < 80:
            return float(at), run_id
    except (ValueError, TypeError):
        pass
    return None


def filters(query) -> dict:
    """The page's filters from its query string, each checked (a bad value is dropped)."""
    status = query.get("status") or ""
    window = query.get("window") or ""
    return {"flow": (query.get("flow") or "")[:200], "status": status if status in STATUSES else "",
            "window": window if window in WINDOWS else "", "q": (query.get("q") or "").strip()[:64]}


def _sql_page(store, f: dict, before, since, limit: int) -> list:
    """One query on an SQL store: :func:`runs_page`'s, with the id text (``LIKE``, escaped) and the
    window as conditions too, so the database stops at the first ``limit`` matches in
    ``(created_at, id)`` order."""
    from flowctl.store.records import run_dict

    sa, r = store.sa, store.t.runs
    q = sa.select(r).where(r.c.parent_id.is_(None)).order_by(r.c.created_at.desc(), r.c.id.desc()).limit(limit)
    q = q.where(r.c.id.contains(f["q"], autoescape=True))
    if f["status"]:
        q = q.where(r.c.status == f["status"])
    if f["flow"]:
        q = q.where(r.c.flow == f["flow"])
    if since is not None:
        q = q.where(r.c.created_at >= since)
    if before is not None:
        q = q.where(sa.or_(r.c.created_at < before[0], sa.and_(r.c.created_at == before[0], r.c.id < before[1])))
    with store._read() as conn:
        return [run_dict(row, store) for row in conn.execute(q).mappings()]


def find(service, f: dict, cursor: str | None, limit: int = PAGE) -> tuple:
    """``(rows, next cursor or None)``: one page of runs matching filters ``f``."""
    store = service.store
    before = cursor_in(cursor) if cursor else None
    since = service.engine.clock.time() - WINDOWS[f["window"]] if f["window"] else None
    if f["q"] and getattr(store, "engine", None) is not None and getattr(store, "t", None) is not None:
        found = _sql_page(store, f, before, since, limit + 1)
        more = len(found) > limit
        found = found[:limit]
        return found, (cursor_out(found[-1]) if more and found else None)
    found, scanned = [], 0
    while len(found) <= limit and scanned < SCAN:
        batch = limit + 1 if not f["q"] else 200
        rows = runs_page(store, status=f["status"] or None, flow=f["flow"] or None, before=before, limit=batch)
        scanned += len(rows)
        for r in rows:
            if since is not None and r["created_at"] < since:
                rows = []
                break
            if not f["q"] or f["q"] in r["id"]:
                found.append(r)
        if len(rows) < batch:
            break
        before = (rows[-1]["created_at"], rows[-1]["id"])
    more = len(found) > limit
    found = found[:limit]
    return found, (cursor_out(found[-1]) if more and found else None)


def _bad_status(request):
    """A 400 page naming the valid statuses when ``status`` is given and is none of them (an empty
    one is no filter), else None: ``?status=bogus`` must not show every run as if filtered."""
    status = request.query_params.get("status")
    if status and status not in STATUSES:
        return message(request, 400, "Unknown status",
                       f"status {status[:40]!r} is not a run status; use one of: {', '.join(STATUSES)}")
    return None


def _rows(service, request):
    f = filters(request.query_params)
    rows, nxt = find(service, f, request.query_params.get("cursor"))
    return f, [views.summary(service.project, r) for r in rows], nxt


def routes(router, service) -> None:
    @router.get("/runs")
    @page("runs:read")
    def runs(request, viewer):
        """The Runs page (400 for a status that is none of the store's)."""
        refused = _bad_status(request)
        if refused is not None:
            return refused
        f, rows, nxt = _rows(service, request)
        return render(request, "runs.html", f=f, rows=rows, next=nxt, statuses=STATUSES, windows=list(WINDOWS),
                      flows=sorted(service.project.flows), cursor=request.query_params.get("cursor") or "")

    @router.get("/runs/rows")
    @page("runs:read")
    def rows(request, viewer):
        """The table body of the Runs page (polled; 400 for an unknown status)."""
        refused = _bad_status(request)
        if refused is not None:
            return refused
        f, rows, nxt = _rows(service, request)
        return render(request, "_runs_rows.html", f=f, rows=rows, next=nxt,
                      cursor=request.query_params.get("cursor") or "")


__all__ = ["find", "filters", "routes"]
