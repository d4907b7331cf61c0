"""The Health page: ``GET /console/health`` [runs:read] — success rate, mean steps, tool failure
rates and the four defence rates against their thresholds, over a chosen window.

Query: ``window`` (``1h``, ``24h``, ``7d``, ``30d``; default ``24h``; empty: any time), ``flow``
(one flow, or all), ``limit`` (the latest runs counted, 1-10,000, default 1,000). The figures are
:func:`flowctl.store.health.health`'s (the computation lives in the store package, so the CLI can
show the same); a rate over its threshold is flagged.
"""
from __future__ import annotations

from flowctl.server.console.auth import page
from flowctl.server.console.runs import WINDOWS
from flowctl.server.console.web import render
from flowctl.store.health import health

LABELS = {"validation_block_rate": "Validation block rate", "pause_timeout_rate": "Pause-timeout rate",
          "rollback_failure_rate": "Rollback-failure rate", "human_takeover_rate": "Human-takeover rate"}


def routes(router, service) -> None:
    @router.get("/health")
    @page("runs:read")
    def health_page(request, viewer):
        """The Health page."""
        q = request.query_params
        window = q.get("window", "24h")
        window = window if window in WINDOWS else ""
        flow = q.get("flow") or ""
        flow = flow if flow in service.project.flows else ""
        try:
            limit = max(1, min(10_000, int(q.get("limit") or 1000)))
        except ValueError:
            limit = 1000
        since = service.engine.clock.time() - WINDOWS[window] if window else None
        report = health(service.store, since=since, limit=limit, flow=flow or None)
        return render(request, "health.html", report=report, labels=LABELS, window=window, windows=list(WINDOWS),
                      flow=flow, flows=sorted(service.project.flows), limit=limit)


__all__ = ["routes"]
