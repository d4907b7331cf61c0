"""Signing in to the console: an API key of ``flowctl serve`` exchanged for a session cookie.

``POST /console/signin`` takes a key (``fck_…``, :mod:`flowctl.store.apikeys`); a live one gets a
session cookie and the key itself is never stored nor sent again. The cookie ``flowctl_session``
is ``base64url(payload).hex(HMAC-SHA256(server secret, payload))`` with the payload ``{k: key id,
n: key name, c: CSRF token, e: expiry}`` — signed, so it cannot be forged or edited; ``HttpOnly``
(no script reads it), ``SameSite=Strict`` (no other site's page sends it), ``Path=/console``,
``Secure`` when the request came over HTTPS. It lasts :data:`SESSION_SECONDS` (8 hours). The
server secret is 32 random bytes made when the app is made (a restart signs everyone out) unless
one is given to :func:`flowctl.server.console.mount`.

On every request the key is looked up again: a revoked key's session ends at once, and the scopes
are the key's as stored (``runs:read`` to see runs and health, ``reviews`` for the inbox,
``runs:write`` for takeover actions; ``admin`` all). Every POST must carry the session's CSRF
token (the hidden field ``csrf`` or the header ``X-CSRF-Token`` htmx sends), else 403 and nothing
is done; the sign-in form itself carries a token bound to a pre-session cookie (login CSRF).
Each refused sign-in is recorded in the service log (session ``access``) as the API's refusals are:
without a session, counted per address and minute (one row a window), so they cannot flood the store.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

from fastapi import Request
from fastapi.responses import RedirectResponse

from flowctl.server.console.web import PREFIX, Viewer, csrf_ok, form, go, message, render

COOKIE = "flowctl_session"
PRE_COOKIE = "flowctl_signin"
#: how long a session lasts, in seconds
SESSION_SECONDS = 8 * 3600


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _sign(secret: bytes, payload: bytes) -> str:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def encode(secret: bytes, data: dict) -> str:
    """The cookie value of session ``data``: the payload and its HMAC."""
    payload = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{payload}.{_sign(secret, payload.encode())}"


def decode(secret: bytes, value: str | None) -> dict | None:
    """The session data of a cookie value whose signature holds and which has not expired, or None."""
    if not value or "." not in value:
        return None
    payload, sig = value.rsplit(".", 1)
    if not hmac.compare_digest(sig.encode(), _sign(secret, payload.encode()).encode()):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("e"), (int, float)) or data["e"] < time.time():
        return None
    return data


def viewer_of(request: Request) -> Viewer | None:
    """The signed-in viewer of ``request`` (its key still live), or None."""
    console = request.app.state.console
    data = decode(console.secret, request.cookies.get(COOKIE))
    if data is None:
        return None
    if _digest(str(data.get("c") or "")) in console.ended:  # signed out: the cookie no longer opens anything
        return None
    row = next((r for r in console.service.keys.list() if r["key_id"] == data.get("k")), None)
    if row is None or row.get("revoked_at") is not None or row["name"] != data.get("n"):
        return None
    return Viewer(row["name"], tuple(row["scopes"]), row["key_id"], str(data.get("c") or ""))


def _cookie(response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path=PREFIX, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def signin_page(request: Request, error: str = "", status: int = 200):
    token = secrets.token_urlsafe(24)
    response = render(request, "signin.html", status=status, error=error, pre=token, viewer=None,
                      next=request.query_params.get("next", ""))
    _cookie(response, request, PRE_COOKIE, token, 900)
    return response


def _next_url(text: str) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if text.startswith(PREFIX + "/") and not text.startswith("//") and "\\" not in text:
        return text
    return PREFIX + "/runs"


async def signin(request: Request):
    """Exchange the posted key for a session cookie (see the module)."""
    fields = await form(request)
    console = request.app.state.console
    pre = request.cookies.get(PRE_COOKIE) or ""
    if not pre or not hmac.compare_digest(pre.encode(), (fields.get("csrf") or "").encode()):
        return message(request, 403, "Refused", "The sign-in form is stale or did not come from this console. "
                       "Reload the page and sign in again.")
    from starlette.concurrency import run_in_threadpool

    row = await run_in_threadpool(console.service.keys.verify, (fields.get("key") or "").strip())
    if row is None:
        await run_in_threadpool(_log_refusal, request, {
            "at": time.time(), "caller": "", "kind": "access_denied", "outcome": "unauthorized",
            "reason": "console sign-in with an unknown or revoked key", "data": _where(request)})
        return signin_page(request, "That key is not known, or it was revoked.", status=401)
    data = {"k": row["key_id"], "n": row["name"], "c": secrets.token_urlsafe(32), "e": time.time() + SESSION_SECONDS}
    response = go(request, _next_url(fields.get("next") or ""))
    _cookie(response, request, COOKIE, encode(console.secret, data), SESSION_SECONDS)
    response.delete_cookie(PRE_COOKIE, path=PREFIX)
    return response


def signout(request: Request, viewer: Viewer, fields: dict):
    """End the session (a POST with the CSRF token, like every action: :func:`action` ``(None)``):
    the cookie is deleted *and* refused from now on, wherever a copy of it is."""
    console = request.app.state.console
    console.ended.add(_digest(viewer.csrf))
    console.service.log.append("access", {"at": time.time(), "caller": viewer.name, "kind": "console_signout",
                                          "outcome": "signed_out", "reason": "signed out of the console"})
    response = go(request, PREFIX + "/signin")
    response.delete_cookie(COOKIE, path=PREFIX)
    return response




def _where(request: Request) -> dict:
    return {"method": request.method, "path": request.url.path,
            "route": getattr(request.scope.get("route"), "path", None)}


def _log_refusal(request: Request, record: dict) -> None:
    """A refusal in the service log: a signed-in viewer's 403 at once; one without a session, or
    past the viewer's rate, counted per address and window, as the API's
    (:class:`~flowctl.store.servicelog.Refusals`): requests without a key, or beyond a key's rate,
    cannot flood the store."""
    service = request.app.state.console.service
    if record["caller"] and record["outcome"] != "rate_limited":
        service.log.append("access", record)
    else:
        service.refusals.note(request.client.host if request.client else "", record)


def _refused(request: Request, viewer: Viewer | None, status: int, reason: str):
    _log_refusal(request, {"at": time.time(), "caller": viewer.name if viewer else "", "kind": "access_denied",
                           "outcome": {401: "unauthorized", 403: "forbidden", 429: "rate_limited"}[status],
                           "reason": reason, "data": _where(request)})
    return message(request, status, {401: "Sign in", 403: "Refused", 429: "Slow down"}[status], reason)


def _admit(request: Request, viewer: Viewer | None, scope: str):
    """None when ``viewer`` may go on with ``scope``, else the refusal; one token of its rate taken
    either way (past the rate: 429, counted per window, whatever the scope)."""
    if viewer is None:
        return _refused(request, None, 401, "Sign in first: this console needs an API key of flowctl serve.")
    request.state.viewer = viewer
    if request.app.state.console.service.buckets.take(viewer.name) > 0:  # a 403 takes its token too
        return _refused(request, viewer, 429, f"Key '{viewer.name}' sent too many requests; try again shortly.")
    if scope and not viewer.can(scope):
        return _refused(request, viewer, 403, f"Key '{viewer.name}' lacks the scope '{scope}'.")
    return None


def page(scope: str):
    """Decorate ``fn(request, viewer) -> response`` as a GET endpoint needing ``scope`` (a visitor
    who is not signed in is sent to the sign-in page, and back afterwards). Runs in the thread pool."""
    def wrap(fn):
        def endpoint(request: Request):
            from urllib.parse import quote

            viewer = viewer_of(request)
            if viewer is None and not request.headers.get("hx-request"):
                here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{PREFIX}/signin?next={quote(here, safe='')}", status_code=303)
            return _admit(request, viewer, scope) or fn(request, viewer)

        endpoint.__name__ = fn.__name__
        endpoint.__doc__ = fn.__doc__
        return endpoint

    return wrap


def action(scope: str):
    """Decorate ``fn(request, viewer, fields) -> response`` as a POST endpoint needing ``scope`` and
    the session's CSRF token: without it 403 and ``fn`` is not called. A refused engine call
    (:class:`~flowctl.errors.FlowctlError`: the run ended, is held, …) is a 409 page saying why."""
    def wrap(fn):
        async def endpoint(request: Request):
            from starlette.concurrency import run_in_threadpool

            from flowctl.errors import FlowctlError

            fields = await form(request)
            viewer = await run_in_threadpool(viewer_of, request)
            if viewer is not None and not csrf_ok(request, viewer, fields):
                return await run_in_threadpool(_refused, request, viewer, 403,
                                               "The request did not carry this session's CSRF token; nothing was done.")
            refused = await run_in_threadpool(_admit, request, viewer, scope)
            if refused is not None:
                return refused

            def call():
                try:
                    return fn(request, viewer, fields)
                except FlowctlError as exc:
                    hint = f" ({exc.hint})" if getattr(exc, "hint", None) else ""
                    return message(request, 409, "Not done", f"{exc}{hint}")

            return await run_in_threadpool(call)

        endpoint.__name__ = fn.__name__
        endpoint.__doc__ = fn.__doc__
        return endpoint

    return wrap


__all__ = ["COOKIE", "SESSION_SECONDS", "action", "decode", "encode", "page", "signin", "signin_page", "signout",
           "viewer_of"]
