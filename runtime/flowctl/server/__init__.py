"""``flowctl serve``: the gate, the runs and the reviews of one project over HTTP (issue 19).

:func:`create_app` builds the ASGI application (FastAPI; the ``flowctl[serve]`` extra); only
``flowctl serve`` imports this package, never ``validate`` or ``run``. Modules: ``app`` (the
endpoints), ``models`` (request and response bodies), ``auth`` (API keys, scopes, rate limits),
``gatecheck`` (the gate asked outside a run), ``views`` (what is shown of a run: nothing sensitive),
``problems`` (RFC 9457 errors), ``guard`` (request size limit, last-resort answer).
"""
from __future__ import annotations

from flowctl.server.app import create_app

__all__ = ["create_app"]
