"""The ASGI application of ``flowctl serve``: :func:`create_app`.

Endpoints (scopes in brackets; every ``/v1`` endpoint needs an API key, see
:mod:`flowctl.server.auth`; every error is a problem, see :mod:`flowctl.server.problems`):

* ``GET /healthz`` — liveness, no key. ``GET /metrics`` [runs:read] — Prometheus text format. ``GET /openapi.json`` — this API's OpenAPI document.
* ``POST /v1/gate/check`` [gate] — allow / deny / review for one tool call (:mod:`flowctl.server.gatecheck`).
* ``GET /v1/runs`` [runs:read] — runs newest first; ``status``, ``flow``, ``limit`` (1-200),
  ``cursor`` (the previous page's ``next_cursor``), ``all`` (child runs too).
* ``GET /v1/runs/{run_id}`` [runs:read] — one run (sensitive values redacted: :mod:`flowctl.server.views`).
* ``GET /v1/runs/{run_id}/events`` [runs:read] — its audit events, ``after`` a seq, ``limit`` at a time.
* ``GET /v1/runs/{run_id}/stream`` [runs:read] — its audit events as Server-Sent Events from ``after``,
  ending when the run ends (:mod:`flowctl.server.stream`).
* ``GET /v1/stats`` [runs:read] — :func:`flowctl.store.history.stats` (``limit``, ``since``, ``flow``, ``children``).
* ``POST /v1/sessions`` [gate], ``…/{session_id}/tools/{tool}/invoke`` [invoke:<tool>],
  ``…/{session_id}/compensate`` and ``…/close`` [gate; the key that opened it, or admin] —
  flowctl calls tools for the caller (:mod:`flowctl.server.sessions`).
* ``POST /v1/runs`` [runs:write] — submit a run: it is *queued for workers* through the same path as
  ``flowctl submit`` (:func:`flowctl.workers.submit.enqueue`); ``flowctl worker`` runs it. A memory
  store has no workers: 400 ``USAGE``.
* ``POST /v1/runs/{run_id}/cancel`` [runs:write] — cancel (compensating unless told not to), as
  ``flowctl cancel``, recorded as by ``key:<name>``.
* ``POST /v1/runs/{run_id}/pause`` [runs:write] — pause at the next checkpoint, as ``flowctl pause``
  (``reason`` required), recorded as by ``key:<name>``; 409 when the run has ended or is already
  paused. ``POST /v1/runs/{run_id}/resume`` [runs:write] — continue it (or a due wait, or an
  orphaned run), in the request's worker thread until it ends, pauses or parks.
* ``GET /v1/reviews`` [reviews] — runs paused for a decision.
* ``POST /v1/reviews/{run_id}/decide`` [reviews] — decide with the review's token, or without one
  as the key's holder (a new token is issued and used at once, recorded as by ``key:<name>``); the run
  then continues in this process (in the request's worker thread) until it ends, pauses or parks.
  Data the review state's ``data_schema`` rejects is a 422 ``REVIEW_DATA_INVALID`` whose ``pointer``
  is into ``/body/data``; nothing is recorded (not even the token issued without one).

Blocking work (the store, the engine) runs in FastAPI's thread pool (the endpoints are plain
``def``), except the gate check's: :class:`flowctl.server.gatefront.GateFront` answers it in front of
FastAPI, the key check, the body and the check on :class:`flowctl.server.lane.Lane` (on SQLite
one thread of its own, concurrent checks written in one transaction). Shapes: :mod:`flowctl.server.models`.
"""
from __future__ import annotations

import base64
import contextlib
import json
import time

import anyio
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from flowctl.engine.engine import Engine
from flowctl.errors import UsageError
from flowctl.gate.policy import Gate
from flowctl.server import gatecheck, gatefront, models, problems, stream, views
from flowctl.server.sessions import Sessions, respond
from flowctl.server.auth import DEFAULT_BURST, DEFAULT_RATE, Buckets, Caller, bearer, need
from flowctl.server.guard import MAX_BODY, Guard
from flowctl.server.lane import Lane
from flowctl.server.responses import Json
from flowctl.store.apikeys import keys_of
from flowctl.store.pages import runs_page
from flowctl.store.records import STATUSES, check_run_id
from flowctl.store.servicelog import Refusals, log_of

TOOL_ID = Path(pattern=r"^[A-Za-z0-9_.-]{1,200}$", description="a contract id (the key needs invoke:<id>)")
SESSION_ID = Path(pattern=r"^[A-Za-z0-9._-]{4,64}$", description="a session id (its run's id) or a unique prefix of one")
RUN_ID = Path(pattern=r"^[A-Za-z0-9._-]{4,64}$", description="a run id or a unique prefix of one (4+ characters)")


class Service:
    """What the endpoints share: the project, its store, an engine and gate on them, the API keys,
    the service log and the per-key buckets."""

    def __init__(self, project, store, *, engine=None, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST,
                 clock=None):
        self.project = project
        self.store = store
        self.engine = engine or Engine(project, store, clock=clock)
        self.gate = Gate(project, store, self.engine.clock)
        self.keys = keys_of(store)
        self.log = log_of(store)
        self.refusals = Refusals(self.log)  # 401s, counted per address and minute
        self.buckets = Buckets(rate, burst)
        self.aliases: dict = {}
        self.sessions = Sessions(self)
        self.lane = Lane(store)


def _bad_query(name: str, message: str):
    raise RequestValidationError([{"loc": ("query", name), "msg": message, "type": "value_error"}])


def _cursor_out(row) -> str:
    return base64.urlsafe_b64encode(json.dumps([row["created_at"], row["id"]]).encode()).decode().rstrip("=")


def _cursor_in(text: str) -> tuple:
    try:
        at, run_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not isinstance(run_id, str):
            raise ValueError
        check_run_id(run_id)
        return float(at), run_id
    except Exception:  # noqa: BLE001 - any undecodable cursor is the caller's mistake
        _bad_query("cursor", "not a cursor this server gave (pass next_cursor of the previous page as it is)")


def create_app(project, store, *, engine=None, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST,
               max_body: int = MAX_BODY, poll: float = 0.25):
    """The ASGI app serving ``project`` over ``store`` (wrapped in :class:`~flowctl.server.guard.Guard`).
    ``rate``/``burst``: each key's request rate (per second) and burst; ``max_body``: request bytes;
    ``poll``: seconds between a run stream's reads of the store (:mod:`flowctl.server.stream`)."""
    from flowctl import __version__

    @contextlib.asynccontextmanager
    async def lifespan(app):
        from flowctl.store.checkpoint import Checkpointer

        checkpoints = Checkpointer(store)  # SQLite: WAL checkpoints off the requests' commits
        checkpoints.start()
        yield
        checkpoints.close()
        service.lane.close()
        gatecheck.close(service)  # after the lane: nothing uses the gate's connection now
        service.refusals.flush()  # the counts of the last window of refusals without a key

    app = FastAPI(title="flowctl", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                  default_response_class=Json,
                  description="The flowctl gate as a service: ask before acting, follow runs, answer reviews.")
    service = Service(project, store, engine=engine, rate=rate, burst=burst)
    app.state.service = service
    problems.install(app)
    json_problem = {"content": {problems.MEDIA_TYPE: {}}, "description": "a problem (RFC 9457)"}
    errs = {s: json_problem for s in (400, 401, 403, 404, 409, 413, 422, 429)}

    @app.get("/healthz", response_model=models.Health)
    def healthz():
        return {"status": "ok", "version": __version__, "store": getattr(store, "safe_url", store.url)}

    gate_body = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": models.GateCheck.model_json_schema()}}}}

    @app.post(gatefront.PATH, response_model=models.GateDecision, responses=errs, tags=["gate"],
              openapi_extra=gate_body, dependencies=[Depends(bearer)])
    async def gate_check(request: Request):
        """Answered by :class:`gatefront.GateFront` in front of this app; this route documents it
        (and answers the same when the app is used without the front)."""
        status, headers, payload = await gatefront.respond(service, request.scope, await request.body())
        return Response(payload, status_code=status, headers={k.decode(): v.decode() for k, v in headers})

    @app.post("/v1/sessions", response_model=models.SessionOpened, status_code=201, responses=errs, tags=["sessions"])
    def open_session(body: models.OpenSession | None = None, caller: Caller = Depends(need("gate"))):
        return service.sessions.open(caller, body.name if body is not None else None)

    @app.post("/v1/sessions/{session_id}/tools/{tool}/invoke", response_model=models.Invoked, tags=["sessions"],
              responses={**errs, 202: {"model": models.Invoked, "description": "held for a review (status review)"}})
    def invoke(body: models.Invoke, session_id: str = SESSION_ID, tool: str = TOOL_ID,
               caller: Caller = Depends(need("invoke:{tool}"))):
        return respond(_conflict(lambda: service.sessions.invoke(caller, session_id, tool, body.input,
                                                                 body.idempotency_key)))

    @app.post("/v1/sessions/{session_id}/compensate", response_model=models.Compensated, responses=errs,
              tags=["sessions"])
    def compensate_session(session_id: str = SESSION_ID, caller: Caller = Depends(need("gate"))):
        return _conflict(lambda: service.sessions.compensate(caller, session_id))

    @app.post("/v1/sessions/{session_id}/close", response_model=models.Closed, responses=errs, tags=["sessions"])
    def close_session(body: models.CloseSession | None = None, session_id: str = SESSION_ID,
                      caller: Caller = Depends(need("gate"))):
        compensate = False if body is None else body.compensate
        return _conflict(lambda: service.sessions.close(caller, session_id, compensate))

    @app.get("/v1/runs", response_model=models.RunPage, responses=errs, tags=["runs"])
    def list_runs(status: str | None = Query(None, max_length=16), flow: str | None = Query(None, max_length=200),
                  limit: int = Query(50, ge=1, le=200), cursor: str | None = Query(None, max_length=200),
                  all: bool = Query(False, description="child runs too"),  # noqa: A002 - the query name
                  caller: Caller = Depends(need("runs:read"))):
        if status is not None and status not in STATUSES:
            _bad_query("status", f"not one of {', '.join(STATUSES)}")
        before = _cursor_in(cursor) if cursor else None
        rows = runs_page(store, status=status, flow=flow, before=before, limit=limit + 1, top_level=not all)
        more = len(rows) > limit
        rows = rows[:limit]
        return {"runs": [views.summary(project, r) for r in rows],
                "next_cursor": _cursor_out(rows[-1]) if more and rows else None}

    @app.get("/v1/runs/{run_id}", response_model=models.RunDetail, responses=errs, tags=["runs"])
    def get_run(run_id: str = RUN_ID, caller: Caller = Depends(need("runs:read"))):
        return views.detail(project, store.get_run(run_id))

    @app.get("/v1/runs/{run_id}/events", response_model=models.EventPage, responses=errs, tags=["runs"])
    def run_events(run_id: str = RUN_ID, after: int = Query(0, ge=0, le=2**31), limit: int = Query(200, ge=1, le=1000),
                   caller: Caller = Depends(need("runs:read"))):
        row = store.get_run(run_id)
        s = views.secrets_of(project, row)
        found = store.events_page(row["id"], after, limit)
        events = [views.event(s, e) for e in found]
        return {"events": events, "next_after": events[-1]["seq"] if len(found) == limit else None}

    @app.get("/v1/runs/{run_id}/stream", responses={**errs, 200: {
        "content": {"text/event-stream": {}}, "description": "Server-Sent Events: id = seq, event = type, data = the event"}},
        response_class=StreamingResponse, tags=["runs"])
    async def run_stream(request: Request, run_id: str = RUN_ID, after: int = Query(0, ge=0, le=2**31),
                         caller: Caller = Depends(need("runs:read"))):
        return await anyio.to_thread.run_sync(lambda: stream.stream(service, request, run_id, after, poll=poll))

    @app.get("/v1/stats", response_model=models.Stats, responses=errs, tags=["runs"])
    def run_stats(limit: int = Query(1000, ge=1, le=100000), since: float | None = Query(None, ge=0, le=1e11),
                  flow: str | None = Query(None, max_length=200), children: bool = Query(False),
                  caller: Caller = Depends(need("runs:read"))):
        from flowctl.store.history import stats

        return stats(store, limit, since, flow=flow, children=children)

    @app.get("/metrics", tags=["runs"], responses=errs, response_class=PlainTextResponse)
    def metrics(limit: int = Query(1000, ge=1, le=100000), flow: str | None = Query(None, max_length=200),
                since: float | None = Query(None, ge=0, le=1e11), caller: Caller = Depends(need("runs:read"))):
        """The figures of the latest ``limit`` runs (created since ``since``, epoch seconds) in
        Prometheus' text format: runs by flow and status, tool calls, failures and a latency
        histogram, gate decisions, compensations, reviews, model tokens and cost, the defence rates
        (:mod:`flowctl.telemetry.metrics`; a scrape job with ``authorization: {credentials: <key>}``,
        scope ``runs:read``)."""
        from flowctl.store.health import health
        from flowctl.telemetry.metrics import prometheus

        return PlainTextResponse(prometheus(health(store, limit=limit, flow=flow, since=since), flow),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/runs", response_model=models.Submitted, status_code=201, responses=errs, tags=["runs"])
    def submit_run(body: models.SubmitRun, caller: Caller = Depends(need("runs:write"))):
        from flowctl.workers.submit import enqueue

        run_id = enqueue(service.engine, body.flow, body.input, params=body.params, queue=body.queue,
                         priority=body.priority)
        service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "run_submitted",
                                         "data": {"run_id": run_id, "flow": body.flow}})
        return {"run_id": run_id, "flow": body.flow, "status": "queued", "queue": body.queue}

    @app.post("/v1/runs/{run_id}/cancel", response_model=models.Outcome, responses=errs, tags=["runs"])
    def cancel_run(body: models.CancelRun | None = None, run_id: str = RUN_ID,
                   caller: Caller = Depends(need("runs:write"))):
        compensate = True if body is None else body.compensate
        result = _conflict(lambda: service.engine.cancel(run_id, compensate=compensate, by=caller.by))
        service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "run_cancelled",
                                         "outcome": result.status, "data": {"run_id": result.run_id}})
        return views.outcome(project, result, store)

    @app.post("/v1/runs/{run_id}/pause", response_model=models.PauseRequested, responses=errs, tags=["runs"])
    def pause_run(body: models.PauseRun, run_id: str = RUN_ID, caller: Caller = Depends(need("runs:write"))):
        asked = _conflict(lambda: service.engine.pause(run_id, reason=body.reason, by=caller.by))
        service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "pause_requested",
                                         "outcome": "requested" if asked["new"] else "already requested",
                                         "data": {"run_id": asked["run_id"], "reason": body.reason}})
        req = asked["request"]
        return {"run_id": asked["run_id"], "status": asked["status"], "new": asked["new"], "by": req.get("by"),
                "reason": req.get("reason"), "at": req.get("at")}

    @app.post("/v1/runs/{run_id}/resume", response_model=models.Outcome, responses=errs, tags=["runs"])
    def resume_run(run_id: str = RUN_ID, caller: Caller = Depends(need("runs:write"))):
        result = _conflict(lambda: service.engine.resume(run_id, by=caller.by))
        service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "run_resumed",
                                         "outcome": result.status, "data": {"run_id": result.run_id}})
        return views.outcome(project, result, store)

    @app.get("/v1/reviews", response_model=list[models.ReviewItem], responses=errs, tags=["reviews"])
    def list_reviews(caller: Caller = Depends(need("reviews"))):
        items = (views.review_item(project, r) for r in store.list_runs(status="paused", limit=0))
        return [i for i in items if i is not None]

    @app.post("/v1/reviews/{run_id}/decide", response_model=models.Outcome, responses=errs, tags=["reviews"])
    def decide(body: models.Decide, run_id: str = RUN_ID, caller: Caller = Depends(need("reviews"))):
        engine = service.engine

        def act():
            token = body.token
            if token is None:  # checked before a token is issued for it: bad data records nothing
                engine.check_decision(run_id, body.decision, body.data)
                token = engine.reissue_token(run_id, by=caller.by)
            return engine.resume(run_id, token=token, decision=body.decision, data=body.data, by=caller.by)

        result = _conflict(act)
        service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "review_decided",
                                         "outcome": body.decision, "data": {"run_id": result.run_id,
                                                                            "status": result.status}})
        return views.outcome(project, result, store)

    from flowctl.server.console import mount  # the operator console under /console (issue 20)

    mount(app, service)
    return Guard(gatefront.GateFront(app, service), max_body=max_body)


def _conflict(fn):
    """Run ``fn``; a :class:`UsageError` about the run's state (ended, held, not paused) is a 409."""
    try:
        return fn()
    except UsageError as exc:
        exc.conflict = True
        raise


__all__ = ["Service", "create_app"]
