"""``GET /v1/runs/{run_id}/stream``: a run's audit events as Server-Sent Events, as they are committed.

Each event is one SSE message (WHATWG HTML, "Server-sent events")::

    id: <seq>
    event: <type>
    data: {"seq", "ts", "type", "state", "attempt", "data", "hash"}   (one JSON line, redacted as GET …/events)

from ``after`` (a seq; or the ``Last-Event-ID`` a reconnecting client sends), in ``seq`` order,
none twice. The store is read every ``poll`` seconds (default 0.25) in batches of 500; a comment
line (``: keep-alive``) goes out every ``keepalive`` seconds of silence, so proxies keep the
connection. The stream ends after the run's last event once the run has ended (succeeded, failed,
cancelled); a run that is paused or waiting keeps it open until the client leaves.
"""
from __future__ import annotations

import json
import time

import anyio
from starlette.responses import StreamingResponse

from flowctl.server import views
from flowctl.store.records import FINAL

BATCH = 500


def message(ev: dict) -> str:
    """One SSE message of an event (already a view: :func:`flowctl.server.views.event`)."""
    return f"id: {ev['seq']}\nevent: {ev['type']}\ndata: {json.dumps(ev, separators=(',', ':'), default=str)}\n\n"


def stream(service, request, run_id: str, after: int, *, poll: float = 0.25, keepalive: float = 15.0):
    """The :class:`StreamingResponse` (``text/event-stream``) of the run ``run_id`` (a unique prefix
    too) from ``after``. Raises :class:`~flowctl.errors.RunNotFound` before anything is sent."""
    store, project = service.store, service.project
    row = store.get_run(run_id)
    run_id = row["id"]
    last_id = request.headers.get("last-event-id", "")
    if last_id.isdigit():
        after = max(after, int(last_id))

    async def events():
        nonlocal after
        quiet_since = time.monotonic()
        while True:
            current = await anyio.to_thread.run_sync(store.get_run, run_id)
            found = await anyio.to_thread.run_sync(store.events_page, run_id, after, BATCH)
            if found:
                s = views.secrets_of(project, current)
                for e in found:
                    yield message(views.event(s, e))
                after = found[-1]["seq"]
                quiet_since = time.monotonic()
                if len(found) == BATCH:
                    continue
            if current["status"] in FINAL and after >= (current.get("last_seq") or 0):
                return
            if await request.is_disconnected():
                return
            if time.monotonic() - quiet_since >= keepalive:
                yield ": keep-alive\n\n"
                quiet_since = time.monotonic()
            await anyio.sleep(poll)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


__all__ = ["message", "stream"]
