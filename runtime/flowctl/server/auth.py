"""Who is calling ``flowctl serve``, and whether they may: API keys, scopes, per-key rate limits.

Every ``/v1`` request carries ``Authorization: Bearer fck_…`` (a key from ``flowctl keys create``,
see :mod:`flowctl.store.apikeys`). No key, an unknown, wrong or revoked one: 401 ``UNAUTHORIZED``;
a key without the endpoint's scope: 403 ``FORBIDDEN``; a key past its request rate: 429
``RATE_LIMITED`` with ``Retry-After``. Each refusal is recorded in the service log (session
``access``: :mod:`flowctl.store.servicelog`) with the key's name when it was recognised, the
method, the path and why — never the presented key. A request without a live key, and a request
past its key's rate, is counted per remote address and reason and written once per minute
(:class:`~flowctl.store.servicelog.Refusals`), so neither can flood the store; a recognised key's
403s are each written.

The rate limit is a token bucket per key name, in this process: ``rate`` requests per second on
average, bursts of ``burst``. Every authenticated request takes one token (a dry-run gate check
too: the bucket protects the server; it is the *policies'* ``rate`` and ``dedupe`` that a dry run
does not count toward).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from flowctl.errors import AccessError, RateLimited, ScopeError
from flowctl.store.apikeys import allows

#: Requests per second per key, on average, and the burst a key may send at once.
DEFAULT_RATE = 50.0
DEFAULT_BURST = 100

bearer = HTTPBearer(auto_error=False, description="an API key from `flowctl keys create`")


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: the key's ``name`` (what records name) and its ``scopes``;
    ``local``: not a key at all but the user who launched ``flowctl mcp`` over stdio."""

    name: str
    scopes: tuple
    key_id: str
    local: bool = False

    @property
    def by(self) -> str:
        """How the run's audit log names this caller (``--by`` of the CLI): ``key:<name>``, or
        ``local:<name>`` for the local user, a name no API key can take (breaker finding: a key
        named ``mcp`` was the stdio user and could act in, and undo, that user's sessions)."""
        return f"{'local' if self.local else 'key'}:{self.name}"


class Buckets:
    """Token buckets per key name: ``take(name)`` is 0 when a request may go, else the seconds until
    one may. ``clock``: a ``() -> seconds`` monotonic function (tests pass a fake one)."""

    def __init__(self, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST, clock=time.monotonic):
        self.rate, self.burst, self.clock = float(rate), float(burst), clock
        self._state: dict = {}
        self._lock = threading.Lock()

    def take(self, name: str) -> float:
        now = self.clock()
        with self._lock:
            tokens, last = self._state.get(name, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._state[name] = (tokens - 1.0, now)
                return 0.0
            self._state[name] = (tokens, now)
            return (1.0 - tokens) / self.rate if self.rate > 0 else 3600.0


def refused(service, exc, caller_name: str, remote: str, data: dict) -> None:
    """Record one refused request: a recognised key's 403 at once; a 401 (no live key) and a 429 (a
    key past its rate: its reason names the key) counted per address and window
    (:class:`~flowctl.store.servicelog.Refusals`) — neither may make the server write once per
    request at whatever rate the requests are sent."""
    record = {"at": time.time(), "caller": caller_name, "kind": "access_denied", "outcome": exc.code.lower(),
              "reason": exc.message, "data": data}
    if caller_name and not isinstance(exc, RateLimited):
        service.log.append("access", record)
    else:
        service.refusals.note(remote, record)


def authorize(service, token: str | None, scope: str, where: dict, remote: str, record: bool = True) -> Caller:
    """The :class:`Caller` whose key ``token`` is (the bearer credentials, None when absent), when
    it is live, has ``scope`` and rate left; else the refusal is recorded (with ``where``:
    ``{method, path, route}``, and ``remote``, the client's address) and raised: ``AccessError``
    (401), ``ScopeError`` (403) or ``RateLimited`` (429). Framework-free: :func:`need` and the gate
    route's front (:mod:`flowctl.server.gatefront`) both call it. ``record=False``: a refusal is
    raised without being recorded (the front's attempt on the event loop, which must not write:
    it hands the request to the gate's lane, which asks again and records). Every request of a
    recognised key takes one token of its bucket, a 403 too (else a key lacking the scope could
    have a row written per request at any rate); a 401 or 429 takes none."""

    def refuse(exc, caller_name: str = ""):
        if record:
            refused(service, exc, caller_name, remote, where)
        raise exc

    if not token:
        refuse(AccessError("this endpoint needs an API key (Authorization: Bearer fck_…)",
                           hint="create one with: flowctl keys create NAME --scope " + scope))
    row = service.keys.verify(token)
    if row is None:
        refuse(AccessError("the API key is not known, or it was revoked", hint="flowctl keys list shows the live keys"))
    caller = Caller(row["name"], tuple(row["scopes"]), row["key_id"])
    allowed = allows(caller.scopes, scope)
    if allowed or record:  # a 403 takes its token where it is recorded (the front's try hands it there)
        wait = service.buckets.take(caller.name)
        if wait > 0:
            refuse(RateLimited(f"key '{caller.name}' sent more than {service.buckets.rate:g} requests per second",
                               retry_after=wait), caller.name)
    if not allowed:
        refuse(ScopeError(f"key '{caller.name}' lacks the scope '{scope}'", hint=f"create a key with --scope {scope}"),
               caller.name)
    return caller


def need(scope: str):
    """A FastAPI dependency: the :class:`Caller` when its key is live, has ``scope`` and rate left
    (:func:`authorize`). ``scope`` may name ``{tool}``: the request's path parameter ``tool`` fills it in."""

    def dependency(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Caller:
        route = getattr(request.scope.get("route"), "path", None)  # the template: /v1/runs/{run_id}/cancel
        where = {"method": request.method, "path": request.url.path, "route": route}
        needed = scope.format(**request.path_params) if "{" in scope else scope
        token = credentials.credentials if credentials is not None else None
        return authorize(request.app.state.service, token, needed, where,
                         request.client.host if request.client else "")

    return dependency


__all__ = ["Buckets", "Caller", "DEFAULT_BURST", "DEFAULT_RATE", "authorize", "need", "refused"]
