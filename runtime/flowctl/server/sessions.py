"""Sessions of ``flowctl serve``: flowctl calls a contract's tool *for* the caller (issue 19).

A session is an ad-hoc run with no flow (:mod:`flowctl.engine.adhoc`): a run row whose ``flow`` is
``session:<name>``, so its calls have one audit log (hash-chained, ``flowctl trace``, ``flowctl
audit verify`` and ``GET /v1/runs/{id}/events`` read it as any run's), one checkpoint and one saga.
Why a run row and not a table of its own: every guarantee a run has (the sealed row, the chain, the
saga surviving a restart, rate and dedupe counted ``per: run``, sensitive values sealed at rest)
then holds for a session without a second implementation of any of them.

* :meth:`Sessions.open` — the run is created (``run_started``, then ``session_opened`` naming the
  caller) and left ``waiting`` with no due time: no worker claims it, ``recover`` skips it.
* :meth:`Sessions.invoke` — one call through the task path, :func:`flowctl.engine.calls.call_tool`:
  the contract's input schema, the default-deny gate (``policy_decided``), the ``started`` record
  of a side-effecting call, the idempotency key (the caller's ``idempotency_key`` in the caller's
  namespace, ``key:<name>:<key>`` (:func:`caller_key`), else the contract's ``idempotency_key``
  expression over ``input``, else ``<session>:<tool>:<n>``), the
  output schema, verify, the saga entry. Each call is a step of the run: a ``state_entered`` event
  (``type: call``, the state id is the contract id, ``by`` names the caller) opens it, so ``trace``
  prints the tools called, in order, with the gate's decision and outcome of each.
* :meth:`Sessions.compensate` — the saga undone newest first (:func:`flowctl.engine.saga.compensate`),
  the session stays open; :meth:`Sessions.close` ends it ``succeeded`` (compensating first when
  asked). ``flowctl cancel SESSION`` compensates and ends it ``cancelled``, as for any run.

A call repeated with the ``idempotency_key`` of a call of the same tool that succeeded in the
session (still in its saga) answers that call's recorded output (``replayed: true``) and calls
nothing; the same key with another input is refused (422): a key names one call.

The answer of an invoke is a 200 with ``status``: ``succeeded`` (``output``), ``denied``
(``decision``: the rule and reason that refused it; nothing was called), ``failed`` (the tool raised
or its output broke the schema: ``error``; its effect, if verify confirmed one, is in the saga). An
agent reads one shape, not a status code, and a denial is not an authorisation failure of the
request. Two answers are not 200, because the call waits on or was refused by a *person*:

* **202** ``status: review`` — a policy's ``review_when`` held: the call was not made and the
  session is ``paused`` on a gate review (``review``: its ``id`` — the session id, which
  ``GET /v1/reviews``, the console's inbox and ``POST /v1/reviews/{id}/decide`` use — the
  ``decisions``, the ``deadline`` (epoch seconds), what the reviewer is shown and how to decide).
  No token is given to the caller: an agent must not approve its own call. While it waits, the
  same call again answers the same 202 and any other call of the session is refused (409).
* After the decision (:func:`flowctl.engine.adhoc.decide`, by a key with the ``reviews`` scope,
  recorded with who) the session is ``waiting`` again and the caller **repeats the same call**
  (same tool, same input, the same or no ``idempotency_key``: the key of the held call is used).
  Approved: it runs once, through the gate as an approved call; the approval is then used up, so
  the same call again asks for a new review (as in a run, :func:`flowctl.engine.gatecall.gate`).
  Rejected, or the deadline passed undecided: **403** problem ``POLICY_DENIED`` (once; nothing
  is called), recorded as a ``policy_decided`` deny with rule ``review`` or ``review_timeout``.

Only the key that opened a session (or an ``admin`` key) acts in it (403 otherwise). One call at a time per session in this process (a lock per session); another process acting in
the same session at once loses the commit race: 409 ``RUN_CONFLICT``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from flowctl.engine import lifecycle, saga
from flowctl.engine.adhoc import PREFIX, SessionFlow, is_session
from flowctl.engine.calls import call_tool
from flowctl.engine.clock import iso
from flowctl.engine.context import PARKED, RunContext, trusted_project
from flowctl.engine.gatecall import call_digest
from flowctl.gate.policy import input_digest
from flowctl.errors import (ExpressionError, FlowctlError, PolicyDenied, RunNotFound, ScopeError, UsageError,
                            error_record, handler_names)
from flowctl.server import gatecheck
from flowctl.store.audit import redact


@dataclass(frozen=True)
class CallState:
    """The state-like object :func:`call_tool` reads for a session's call: its ``id`` (the contract
    id), no input mapping or schema of its own (the caller gives the input), the contract's timeout."""

    id: str
    input: Any = None
    input_schema: Any = None
    timeout: Any = None
    type: str = "task"

    def where(self, *path) -> str:
        return f"(session call of {self.id})"


class SessionContext(RunContext):
    """A :class:`RunContext` on a session's run, made for one request. A gate review pauses the
    session (``park``) with the session's own pending kept in the review's (``session``) and the
    call's idempotency key (``key``: None when the contract's expression makes it), for the repeat
    of the call. ``committed``: the events this context has committed, as ``(type, data)``, oldest
    first (what the answer reads back, without reading the store)."""

    call_key: str | None = None

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.committed: list = []

    def commit(self, status=None, **fields):
        events = [(e[2], e[6]) if isinstance(e, tuple) else (e["type"], e["data"]) for e in self.events]
        super().commit(status, **fields)
        self.committed.extend(events)

    def park(self, status, pending, available_at, *, keep_due=False):
        pending = dict(pending, session=self.session_pending, key=self.call_key)
        return super().park(status, pending, available_at, keep_due=keep_due)


def _session_pending(name: str, by: str) -> dict:
    return {"kind": "session", "name": name, "opened_by": by}


class Sessions:
    """The sessions of one :class:`~flowctl.server.app.Service` (the HTTP endpoints and ``flowctl mcp``)."""

    def __init__(self, service):
        self.service = service
        self._locks: dict = {}
        self._guard = threading.Lock()

    def _lock(self, run_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def open(self, caller, name: str | None = None) -> dict:
        """A new session for ``caller``: ``{session, name, flow, status}``. ``name`` defaults to the key's."""
        service = self.service
        name = name or caller.name
        flow = SessionFlow(PREFIX + name)
        runner = lifecycle.create(service.engine, service.project, flow, {}, {})  # not driven: no states
        runner.cursor.pending = _session_pending(name, caller.by)
        runner.emit("session_opened", by=caller.by, name=name)
        runner.commit(status="waiting", available_at=None)
        return {"session": runner.id, "name": name, "flow": flow.id, "status": "waiting"}

    def _context(self, caller, session_id: str) -> SessionContext:
        engine = self.service.engine
        row = engine.store.get_run(session_id)
        if not is_session(row["flow"]):
            raise RunNotFound(f"run {row['id']} is not a session (its flow is {row['flow']})",
                              hint="open one with POST /v1/sessions")
        if row["status"] not in ("waiting", "paused"):
            exc = UsageError(f"session {row['id']} has ended ({row['status']})", hint="open a new one")
            exc.conflict = True
            raise exc
        project = trusted_project(engine, row)
        ctx = SessionContext(engine, project, SessionFlow(row["flow"]), row)
        pending = ctx.cursor.pending or {}
        if row["status"] == "paused":  # on a gate review of one of its calls
            pending = pending.get("session") or {}
        ctx.session_pending = pending if pending.get("kind") == "session" else _session_pending("", "")
        if ctx.session_pending.get("opened_by") != caller.by and "admin" not in caller.scopes:
            raise ScopeError(f"session {ctx.id} was opened by {ctx.session_pending.get('opened_by') or 'another caller'}; "
                             f"key '{caller.name}' may not act in it", hint="open a session of your own, or use an admin key")
        return ctx

    def invoke(self, caller, session_id: str, tool: str, tool_input, idempotency_key: str | None = None) -> dict:
        """Call ``tool`` (a contract id, optionally ``@range``) with ``tool_input`` in the session, for
        ``caller``: ``{session, tool, status, decision, output, error, idempotency_key, seq, review}``
        (see the module; :func:`respond` makes the HTTP answer). Raises :class:`RunNotFound` (no
        such session), :class:`UsageError` (ended, or waiting on the review of another call: 409)."""
        with self._lock(session_id):
            ctx = self._context(caller, session_id)
            if idempotency_key:
                idempotency_key = caller_key(caller, idempotency_key)
            refused, contract = gatecheck.refusal(self.service, tool, tool_input)
            ref = contract.ref if contract is not None else tool
            sid = contract.id if contract is not None else tool.partition("@")[0]
            digest = call_digest(ctx.secrets, tool_input)  # keyed in a sensitive session, as the engine's
            out = {"session": ctx.id, "tool": ref, "status": "denied", "decision": None, "output": None,
                   "error": None, "idempotency_key": None, "seq": None, "review": None}
            if idempotency_key and contract is not None:
                done = _done_before(ctx, contract, idempotency_key, tool_input)
                if done is not None:  # the same call again: its recorded outcome, the tool not called twice
                    kept = _redacted(ctx, redact(done["output"], contract.sensitive))
                    return dict(out, status="succeeded", output=kept,
                                decision={"decision": "allow", "policy": "", "rule": "idempotent-replay",
                                          "reason": f"{ref} with idempotency key {idempotency_key!r} succeeded at "
                                                    f"step {done.get('step')} of this session: its recorded output; "
                                                    "the tool was not called again"},
                                idempotency_key=idempotency_key, seq=ctx.last_seq, replayed=True)
            timed_out = False
            if ctx.row["status"] == "paused":
                held = ctx.cursor.pending
                if not _same(held.get("call"), held.get("key"), ref, digest, idempotency_key):
                    exc = UsageError(f"session {ctx.id} waits for the review of a call of {held['call']['tool']}; "
                                     "no other call is made meanwhile",
                                     hint=f"a reviewer decides it (POST /v1/reviews/{ctx.id}/decide), then repeat "
                                          "that call")
                    exc.conflict = True
                    raise exc
                if not ctx.review_expired():  # still waiting: the same answer, nothing recorded
                    return dict(out, status="review", decision=_decision(held["show"] | {"outcome": "review"}),
                                idempotency_key=held.get("key"), review=_review(ctx.id, held), seq=ctx.last_seq)
                timed_out = True
            c = ctx.cursor
            c.step += 1
            c.attempt = 1
            c.visits[sid] = c.visits.get(sid, 0) + 1
            c.path.append(sid)
            c.state_info = {"id": sid, "entered_at": iso(ctx.clock.time()), "attempt": 1}
            ctx.emit("state_entered", sid, 1, type="call", step=c.step, visit=c.visits[sid], tool=ref, by=caller.by,
                     **({"idempotency_key": idempotency_key} if idempotency_key else {}))
            if refused is not None:
                if ctx.secrets is not None and contract is not None:  # an input_schema's reason quotes the input
                    ctx.secrets.learn(tool_input)
                ctx.emit("policy_decided", sid, 1, tool=ref, **refused.as_dict())
                out["decision"] = _decision(_redacted(ctx, refused.as_dict()))
                return self._done(ctx, out)
            if timed_out:
                return self._timed_out(ctx, sid, out)
            review = c.review or {}
            approved = False
            if _same(review.get("call"), review.get("key"), ref, digest, idempotency_key) and "key" in review \
                    and review.get("decision") and not review.get("used"):  # the repeat of a decided call
                key = idempotency_key or review.get("key")
                if review["decision"] != "approve":
                    c.review = dict(review, used=True)
                    return self._refused(ctx, sid, out, "review", f"{ref} was rejected in review by "
                                         f"{review.get('by') or 'a reviewer'} at {review.get('at')}")
                c.review = dict(review, step=c.step, state=sid)  # the approval covers this call, once
                approved = True
            else:
                key = idempotency_key or (None if contract.idempotency_key else f"{ctx.id}:{sid}:{c.visits[sid]}")
            ctx.call_key = key
            failed = None
            try:  # key None: call_tool evaluates the contract's idempotency_key expression
                output = call_tool(ctx, CallState(sid), contract, 1, tool_input=tool_input, key=key)
            except PolicyDenied as exc:
                found = _last(ctx, "policy_decided")
                out["decision"] = _decision(found) if found else {"decision": "deny", "policy": "", "rule": "",
                                                                    "reason": str(exc)}
            except Exception as exc:  # noqa: BLE001 - the tool's own error (tool_failed) or the call's: answered
                failed = exc
                code = exc.code if isinstance(exc, FlowctlError) else "TOOL_ERROR"
                message = _redacted(ctx, str(exc))  # as it is recorded: a tool's message may quote a secret
                if isinstance(exc, ExpressionError):
                    message += ("; a session call has no run: run_input is {} and context is {} (give the call's "
                                "idempotency_key, or make the contract's expressions read input)")
                out.update(status="failed", error={"type": handler_names(exc)[0], "code": code, "message": message})
            else:
                if output is PARKED:  # committed: the session is paused on the review
                    found = _last(ctx, "policy_decided", committed=True)
                    out.update(status="review", decision=_decision(found) if found else None, idempotency_key=key,
                               review=_review(ctx.id, ctx.cursor.pending))
                else:
                    out.update(status="succeeded", output=_redacted(ctx, redact(output, contract.sensitive)),
                               decision={"decision": "allow", **_allowed(ctx)})
            tool_event = _last(ctx, "tool_invoked", committed=True)
            if tool_event:  # the key itself; an expression's value as recorded (hashed in a sensitive session)
                out["idempotency_key"] = key or tool_event.get("idempotency_key")
            if failed is not None:  # recorded as a flow's step failure is, and the session goes on
                ctx.emit("error_caught", sid, 1, error=dict(error_record(failed, sid, 1), message=out["error"]["message"]),
                         layer="session", handler=None)
                if approved and not tool_event:  # nothing was called: the approval still covers this call
                    c.review = {k: v for k, v in c.review.items() if k != "used"}
            return self._done(ctx, out)

    def _refused(self, ctx, sid: str, out: dict, rule: str, reason: str, status: str | None = None) -> dict:
        """A held call refused by its review (rejected, or undecided by the deadline): recorded as
        the gate's deny of this call; answered ``status: rejected`` (403)."""
        review = ctx.cursor.review or {}
        call = review.get("call") or {}
        decided = {"outcome": "deny", "policy": call.get("policy", ""), "rule": rule, "reason": reason}
        ctx.emit("policy_decided", sid, 1, tool=out["tool"], **decided)
        out.update(status="rejected", decision=_decision(decided))
        return self._done(ctx, out, status)

    def _timed_out(self, ctx, sid: str, out: dict) -> dict:
        held = ctx.cursor.pending
        ctx.emit("review_timed_out", sid, 1, policy=held["show"].get("policy"), rule="review_timeout")
        ctx.cursor.review = {"decision": "timeout", "call": held.get("call"), "key": held.get("key"), "used": True}
        ctx.cursor.pending = ctx.session_pending
        return self._refused(ctx, sid, out, "review_timeout", f"{out['tool']} was not reviewed by "
                             f"{iso(held['deadline'])} (default deny)", status="waiting")

    def _done(self, ctx, out: dict, status: str | None = None) -> dict:
        if status:
            ctx.commit(status=status, available_at=None)
        elif ctx.events:
            ctx.commit()
        out["seq"] = ctx.last_seq
        return out

    def compensate(self, caller, session_id: str) -> dict:
        """Undo the session's completed side effects newest first; the session stays open.
        ``{session, compensated: [tool refs, newest first], residue, status}``."""
        with self._lock(session_id):
            ctx = self._context(caller, session_id)
            undone = [e["tool"] for e in reversed(ctx.cursor.saga)]
            before = len(ctx.cursor.residue)
            ctx.emit("session_compensate", by=caller.by, entries=len(undone))
            ctx.commit()
            saga.compensate(ctx, reason=f"session compensated by {caller.by}")
            if ctx.events:
                ctx.commit()
            residue = ctx.cursor.residue[before:]
            failed = {r.get("idempotency_key") for r in residue}
            return {"session": ctx.id, "status": ctx.row["status"], "compensated": undone,
                    "residue": _redacted(ctx, [dict(r) for r in residue]), "failed": len(failed)}

    def close(self, caller, session_id: str, compensate: bool = False) -> dict:
        """End the session ``succeeded`` (after undoing its effects when ``compensate``):
        ``{session, status, calls, compensated, residue}``."""
        undone: list = []
        residue: list = []
        if compensate:
            done = self.compensate(caller, session_id)
            undone, residue = done["compensated"], done["residue"]
        with self._lock(session_id):
            ctx = self._context(caller, session_id)
            c = ctx.cursor
            c.done = True
            c.pending = None
            calls = c.step
            output = {"calls": calls, "compensated": len(undone), "open_effects": len(c.saga)}
            ctx.emit("session_closed", by=caller.by, **output)
            ctx.emit("run_succeeded", output=output)
            ctx.commit(status="succeeded", output=output, available_at=None)
        with self._guard:
            self._locks.pop(session_id, None)
        return {"session": ctx.id, "status": "succeeded", "calls": calls, "compensated": undone, "residue": residue}


def _redacted(ctx, value):
    """``value`` redacted by value with the session's secrets (what its audit log records), for
    the answer: a tool's error message or output quoting a card number under another name."""
    return value if ctx.secrets is None else ctx.secrets.scrub(value)


def _last(ctx, type_: str, committed: bool = False) -> dict | None:
    """The data of the last ``type_`` event of this call (buffered, or committed by it already:
    ``ctx`` is this request's, so what it committed is this call's)."""
    for ev in reversed(ctx.events):
        if ev["type"] == type_:
            return ev["data"]
        if ev["type"] == "state_entered":
            return None
    if committed:
        for found, data in reversed(ctx.committed):
            if found == type_:
                return data or {}
            if found == "state_entered":
                return None
    return None


def caller_key(caller, key: str) -> str:
    """The idempotency key a tool is called with for the caller's ``key``: in the caller's own
    namespace, ``key:<name>:<key>`` (a key already in it is kept as it is). A caller never names
    a key of a run or of another caller: tools deduplicate on the key and answer with the effect
    it names, which a session's saga would then take as its own and could undo (breaker finding:
    a session passing another run's key reversed that run's payment). The same caller's key
    still names one call across its sessions, so a retry after a lost answer does not act twice."""
    prefix = f"{caller.by}:"
    return key if key.startswith(prefix) else prefix + key


def _done_before(ctx, contract, key: str, tool_input):
    """The saga entry of a call of ``contract`` this session already made with idempotency key
    ``key`` (succeeded, not undone), or None. Raises :class:`UsageError` (422, ``field``
    ``idempotency_key``) when that call had another input: a key names one call."""
    for entry in reversed(ctx.cursor.saga):
        if entry.get("idempotency_key") != key or str(entry.get("tool", "")).partition("@")[0] != contract.id:
            continue
        kept = input_digest(entry.get("input"))  # the input as the saga keeps it (sensitive fields maybe redacted)
        if kept not in (input_digest(tool_input), input_digest(redact(tool_input, contract.sensitive))):
            raise UsageError(f"idempotency key {key!r} was used by the call of {entry.get('tool')} at step "
                             f"{entry.get('step')} of this session with another input",
                             hint="a key names one call: repeat it with the same input, or give this call a new key",
                             field="idempotency_key")
        return entry
    return None


def _same(call, key, ref: str, digest: str, idempotency_key) -> bool:
    """Whether a call (``ref``, input ``digest``, the caller's key) is the one a review held."""
    return (isinstance(call, dict) and call.get("tool") == ref and call.get("digest") == digest
            and (idempotency_key is None or idempotency_key == key))


def _review(session_id: str, pending: dict) -> dict:
    """The ``review`` of a 202 answer: what a reviewer decides and how (never the token)."""
    show = pending.get("show") or {}
    return {"id": session_id, "tool": show.get("tool"), "policy": show.get("policy"), "rule": show.get("rule"),
            "reason": show.get("reason"), "decisions": list(pending.get("decisions") or ()),
            "deadline": pending.get("deadline"),
            "how": f"a key with the reviews scope decides it: POST /v1/reviews/{session_id}/decide "
                   '{"decision": "approve"} (or in the console\'s inbox); then repeat this call to have it '
                   "made, or to read the rejection"}


def respond(out: dict):
    """The HTTP answer of :meth:`Sessions.invoke`: 202 for a call held for review, a 403 problem
    ``POLICY_DENIED`` for one its review refused, else ``out`` itself (200)."""
    from flowctl.server.responses import Json

    from flowctl.server.models import Invoked
    from flowctl.server.problems import problem

    if out["status"] == "review":
        return Json(Invoked(**out).model_dump(mode="json"), status_code=202)
    if out["status"] == "rejected":
        d = out["decision"]
        return problem(403, PolicyDenied.code, d["reason"], hint="the reviewer's decision stands; a new call of it "
                       "asks for a new review", session=out["session"], tool=out["tool"], decision=d, seq=out["seq"])
    return out


def _decision(data: dict) -> dict:
    return {"decision": data.get("outcome", data.get("decision", "deny")), "policy": data.get("policy", ""),
            "rule": data.get("rule", ""), "reason": data.get("reason", "")}


def _allowed(ctx) -> dict:
    found = _last(ctx, "policy_decided", committed=True)
    if found:
        return {k: v for k, v in _decision(found).items() if k != "decision"}
    return {"policy": "", "rule": "read-only", "reason": "the contract declares no side effects"}


__all__ = ["CallState", "SessionContext", "Sessions", "caller_key", "respond"]
