"""The operator console of ``flowctl serve`` (issue 20): server-rendered pages under ``/console``.

Jinja2 templates with htmx (vendored in ``static/``, no CDN), one module per page: :mod:`.runs`,
:mod:`.run`, :mod:`.reviews`, :mod:`.actions` (takeover), :mod:`.health`, and :mod:`.auth` (sign-in
with an API key, the session cookie, CSRF); :mod:`.web` holds what they share. Pages call the
library directly (the store's readers, the engine, :mod:`flowctl.graph`), never the HTTP API.

:func:`mount` adds the console to the FastAPI app :func:`flowctl.server.app.create_app` makes.
"""
from __future__ import annotations

import secrets as _secrets
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse

from flowctl.server.console import actions, auth, health, reviews, run, runs
from flowctl.server.console.web import PREFIX, static


@dataclass
class Console:
    """What the console keeps on ``app.state.console``: the service and the secret signing sessions."""

    service: object
    secret: bytes
    #: sessions signed out (their CSRF tokens' SHA-256): refused until they would have expired.
    #: Per process, like the default secret (a restart signs everyone out anyway).
    ended: set = field(default_factory=set)


def mount(app, service, *, secret: bytes | None = None) -> None:
    """Serve the console on ``app`` under ``/console`` over ``service``
    (:class:`flowctl.server.app.Service`). ``secret``: the key signing session cookies (default:
    32 random bytes, so a restart signs everyone out). Without Jinja2 installed every console path
    answers 503 saying so (the API still works)."""
    app.state.console = Console(service, secret or _secrets.token_bytes(32))
    router = APIRouter(prefix=PREFIX, include_in_schema=False)
    try:
        import jinja2  # noqa: F401 - the templates' engine, part of the flowctl[serve] extra
    except ImportError:
        @router.get("{rest:path}")
        def missing(rest: str):
            return PlainTextResponse("the console needs Jinja2: pip install 'flowctl[serve]'", status_code=503)

        app.include_router(router)
        return

    @router.get("")
    @router.get("/")
    def home(request: Request):
        return RedirectResponse(PREFIX + "/runs", status_code=303)

    @router.get("/static/{name}")
    def static_file(name: str):
        return static(name)

    @router.get("/signin")
    def signin_form(request: Request):
        return auth.signin_page(request)

    router.add_api_route("/signin", auth.signin, methods=["POST"])
    router.add_api_route("/signout", auth.action(None)(auth.signout), methods=["POST"])
    for module in (runs, run, reviews, actions, health):
        module.routes(router, service)
    app.include_router(router)


__all__ = ["Console", "mount"]
