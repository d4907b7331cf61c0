"""``POST /v1/gate/check`` answered in front of FastAPI: the gate's hot path as a service.

Agents ask the gate before every side effect, so this endpoint's latency is what the service costs
them. Through FastAPI's dependency injection, body model and middleware stack, a request cost more
than the check itself: on this 2-core machine a bare Starlette route answered about 5,800
requests/s, the same route in FastAPI with a body model and one dependency about 1,800 (both with
no work), and the gate check's p99 with 8 clients was 10 times its target. :class:`GateFront` is
an ASGI layer between :class:`~flowctl.server.guard.Guard` (size limit, last-resort 500) and the
FastAPI app: it answers exactly ``POST /v1/gate/check`` and passes every other request on. The
answer is the one the rest of the API would give, in the same order:

1. the key (``Authorization: Bearer``), before the body is looked at, so a caller without a live
   key learns nothing of what the endpoint accepts: :func:`flowctl.server.auth.authorize`, its
   401/403/429 problems recorded as every endpoint's are;
2. the body: JSON (read as FastAPI reads it, :func:`json.loads`) validated by
   :class:`flowctl.server.models.GateCheck`: a 400 ``MALFORMED_JSON`` or a 422 ``INVALID_REQUEST``
   problem located at the field (:func:`flowctl.server.problems.invalid`);
3. the check: :func:`flowctl.server.gatecheck.check_many`.

On a SQLite store the three run on the event loop itself, the requests that arrived in the same
turn of the loop answered together, their checks in one transaction that never waits; what would
have to wait or write elsewhere (a taken write lock, a refused key) goes to the gate's
:class:`~flowctl.server.lane.Lane` (:class:`GateFront`). The FastAPI app keeps a route at the
same path (:func:`respond`, through the lane), so the operation is in ``/openapi.json`` with its
request and response models, and the app used without the front answers the same.
"""
from __future__ import annotations

import asyncio
import json

from pydantic import ValidationError

from flowctl.errors import FlowctlError

from flowctl.server import gatecheck, models, problems
from flowctl.server.auth import authorize

PATH = "/v1/gate/check"
#: bytes of a body answered on the event loop, at most: a larger one (its JSON read, validated and
#: redacted took 0.1–0.4 s for 1 MiB, every other request waiting) is answered on the gate's lane
INLINE_BODY = 64 * 1024
ROUTE = {"method": "POST", "path": PATH, "route": PATH}


class GateFront:
    """ASGI: ``GateFront(app, service)`` answers ``POST /v1/gate/check`` for ``service``
    (:class:`flowctl.server.app.Service`) and hands every other request to ``app``.

    On a SQLite or memory store the answer is first tried **on the event loop**, with no hop to
    another thread (a hop cost about as much as the check: two wake-ups and the GIL passed back and
    forth): the requests whose bodies arrived in the same turn of the loop are answered together
    in the next (:func:`answer_many` with ``inline``), their checks in one transaction that never
    waits — if the store's write lock is taken, by a thread of this process or by another process
    (a worker), or a key is refused (its refusal must be written), the request goes to the gate's
    :class:`~flowctl.server.lane.Lane`, which may wait, instead. On PostgreSQL (a round trip
    per statement), and for a body over :data:`INLINE_BODY` bytes, every request goes to the lane."""

    def __init__(self, app, service):
        self.app = app
        self.service = service
        self.inline = not getattr(service.store, "pg", False)
        self._pending: dict = {}  # event loop -> [(job, future)] waiting for its next turn

    @property
    def state(self):  # the FastAPI app's state (app.state.service), as if this layer were not here
        return self.app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks = []
        while True:  # Guard has bounded it already
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        job = _job(self.service, scope, body)
        if self.inline and len(body) <= INLINE_BODY:
            status, headers, body = await self._inline(job)
        else:
            status, headers, body = await self.service.lane.batch(_answer_jobs, job)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _inline(self, job):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:  # the first of this turn: answered after the others ready in it
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        pending.append((job, future))
        out = await future
        if isinstance(out, _Lane):  # authorized already (its token taken) or to be authorized there
            out = await self.service.lane.batch(_answer_jobs, job[:-1] + (out.caller,))
        if isinstance(out, BaseException):
            raise out
        return out

    def _flush(self, loop) -> None:
        items = self._pending.pop(loop)
        try:
            results = answer_many(self.service, [job[1:] for job, _ in items], inline=True)
        except Exception as exc:  # noqa: BLE001 - a bug: each request of the batch answers it (500)
            results = [exc] * len(items)
        for (_, future), result in zip(items, results):
            if not future.done():  # a client that went away is not answered
                future.set_result(result)


class _Lane:
    """What :func:`answer_many` gives (``inline``) for a request the gate's lane is to answer
    instead: ``caller``, the :class:`~flowctl.server.auth.Caller` its key was already authorized as
    (its token taken: the lane does not take another), or None (a refused key: the lane asks again
    and records the refusal)."""

    __slots__ = ("caller",)

    def __init__(self, caller=None):
        self.caller = caller


#: a request whose key the gate's lane is to authorize (and record the refusal of)
LANE = _Lane()


def _job(service, scope, body: bytes) -> tuple:
    token = content_type = None
    for name, value in scope.get("headers") or ():
        if name == b"authorization" and token is None:  # the first, as Starlette's headers.get reads it
            token = value.decode("latin-1")
        elif name == b"content-type" and content_type is None:
            content_type = value
    client = scope.get("client")
    return service, token, content_type, body, client[0] if client else "", None


async def respond(service, scope, body: bytes) -> tuple:
    """``(status, ASGI header list, body bytes)``: the answer to one gate check request (``scope``:
    its ASGI scope, for the key, the content type and the client's address), from the gate's lane."""
    return await service.lane.batch(_answer_jobs, _job(service, scope, body))


def _answer_jobs(jobs) -> list:
    """The lane's handler (one function, so concurrent requests are handed to it together): a
    service's lane carries only that service's jobs."""
    return answer_many(jobs[0][0], [job[1:] for job in jobs])


def answer_many(service, jobs, inline: bool = False) -> list:
    """The answers (``(status, headers, body)``) to ``jobs`` (``(authorization header, content type,
    body, remote address, caller)``; ``caller`` None, or the :class:`~flowctl.server.auth.Caller`
    the event loop's try authorized already), in order: keys and bodies first, then the checks
    together. A bug's exception is the answer of its request alone. ``inline`` (on the event loop:
    nothing may wait or be written outside the checks' one transaction): a request whose key is
    refused is answered :data:`LANE` instead, and every check when the store's write lock is
    taken a :class:`_Lane` naming its caller (each request takes one token of its key's rate)."""
    out: list = [None] * len(jobs)
    checks, where = [], []
    for k, (header, content_type, body, remote, caller) in enumerate(jobs):
        try:
            if caller is None:
                caller = authorize(service, _bearer(header), "gate", ROUTE, remote, record=not inline)
        except FlowctlError as exc:
            out[k] = LANE if inline else _error(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a bug: this request's alone
            out[k] = exc
            continue
        try:
            asked = _parse(content_type, body)
        except Exception as exc:  # noqa: BLE001 - a problem of this request alone
            out[k] = _error(exc)
            continue
        if isinstance(asked, tuple):  # (status, problem): the body was not a check
            out[k] = _answer(asked[0], asked[1], problem=True)
            continue
        checks.append((caller, asked.tool, asked.input, asked.session, asked.dry_run))
        where.append(k)
    if checks:
        try:
            answers = gatecheck.check_many(service, checks, nowait=inline)
        except gatecheck.Busy:
            answers = [_Lane(one[0]) for one in checks]
        for k, answer in zip(where, answers):
            if isinstance(answer, _Lane):
                out[k] = answer
            else:
                out[k] = _error(answer) if isinstance(answer, BaseException) else _answer(200, answer)
    return out


def _bearer(header: str | None):
    """The credentials of ``Authorization: Bearer <key>`` (the scheme in any case, as HTTPBearer
    takes it), or None."""
    if not header:
        return None
    scheme, _, credentials = header.partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def _parse(content_type, body: bytes):
    """The :class:`~flowctl.server.models.GateCheck` ``body`` holds, or ``(status, problem)``."""
    if not body:
        return problems.invalid([{"loc": ("body",), "msg": "Field required", "type": "missing"}])
    if not content_type or not _is_json(content_type):  # as FastAPI (strict): the bytes, which no model takes
        return problems.invalid([{"loc": ("body",), "msg": "Input should be a valid dictionary or object to extract "
                                  "fields from", "type": "model_attributes_type"}])
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return problems.invalid([{"loc": ("body", exc.pos), "msg": "JSON decode error", "type": "json_invalid"}])
    except UnicodeError:
        raise  # not UTF-8, or a lone surrogate: problems.of_error's 400
    except ValueError as exc:  # a number past int_max_str_digits (4,300 digits): what FastAPI answers 400
        return 400, problems.body_of(400, problems.INVALID_REQUEST, f"the request body cannot be read: {exc}")
    try:  # as FastAPI validates a body model (from_attributes): the same errors, a non-object's too
        return models.GateCheck.model_validate(data, from_attributes=True)
    except ValidationError as exc:
        return problems.invalid([dict(e, loc=("body", *e["loc"])) for e in exc.errors()])


def _is_json(content_type: bytes) -> bool:
    """Whether a ``Content-Type`` is ``application/json`` or ``application/<anything>+json``."""
    main, _, sub = content_type.split(b";")[0].strip().lower().partition(b"/")
    return main == b"application" and (sub == b"json" or sub.endswith(b"+json"))


def _answer(status: int, document: dict, problem: bool = False) -> tuple:
    body = json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    media = problems.MEDIA_TYPE.encode() if problem else b"application/json"
    return status, [(b"content-type", media), (b"content-length", str(len(body)).encode())], body


def _error(exc: BaseException):
    """A known error as its answer; anything else (a bug) the exception itself, which the lane
    raises to this request's caller alone (Guard answers it 500 and logs it)."""
    found = problems.of_error(exc) if isinstance(exc, Exception) else None
    if found is None:
        return exc
    status, headers, document = found
    status_, head, body = _answer(status, document, problem=True)
    return status_, head + [(k.lower().encode(), v.encode()) for k, v in headers.items()], body


__all__ = ["GateFront", "PATH", "answer_many", "respond"]
