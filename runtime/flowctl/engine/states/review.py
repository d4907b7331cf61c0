"""``type: review``: pause for a person's decision, decided with a one-time token.

Entering the review issues a token (:mod:`flowctl.engine.tokens`: shown once, stored as its
hash), builds ``show``, calls the ``notify`` tool if any (``{token, run_id, show, decisions,
deadline}``) and parks the run ``paused`` with ``pending: {kind: review, state, token_hash,
decisions, show, deadline, remind_at}``. :func:`decide` takes a decision; on the next step the
state returns and the transitions read ``review`` (``{decision, data, by, at, ...}``). A review
whose ``timeout`` passed undecided takes ``on_timeout`` (``goto``, or ``fail`` with a name;
default: fail ``ReviewTimeout``). :func:`remind` notifies again after ``remind_after``. A review
with a ``data_schema`` takes a decision only with data that satisfies it (:func:`check_data`; no
data is checked, and recorded, as ``{}``): bad data is refused before anything is recorded.
"""
from __future__ import annotations

import hmac

from flowctl.definition.durations import parse_duration
from flowctl.definition.runtime_schemas import locate_problem
from flowctl.engine.calls import notify, recover_notify
from flowctl.engine.clock import iso
from flowctl.engine.payload import not_json
from flowctl.engine.tokens import TOKEN_ATTEMPTS, TOKEN_WINDOW, hash_token, new_token
from flowctl.errors import (DecisionInvalid, ExpressionError, FlowFailed, ReviewDataInvalid, ReviewTimeout, UsageError, handler_names,
                            run_error)
from flowctl.expr.expressions import compile_expr
from flowctl.expr.scope import build


def run(ctx, state):
    """The response once decided; ``DONE`` after an ``on_timeout: {goto}``; else ``PARKED``.
    Raises ``ReviewTimeout`` (or the ``on_timeout`` fail name) when the deadline passed."""
    c = ctx.cursor
    pending = c.pending or {}
    if pending.get("kind") == "review" and pending.get("decided"):
        c.pending = None
        return c.response
    if pending.get("kind") == "review" and ctx.review_expired():
        return timed_out(ctx, state)
    if c.inflight and c.inflight.get("state") == state.id:  # its notify call was cut short
        recover_notify(ctx, state)
    token, token_hash = new_token()
    ctx.issued_token = token
    scope = ctx.scope()
    show = build(state.show or {}, scope, state.where("show"))
    timeout = state.review_timeout
    if isinstance(timeout, dict):
        seconds = compile_expr(timeout["expr"], state.where("timeout")).evaluate(scope)
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
            raise ExpressionError(f"timeout of review '{state.id}' gave {seconds!r}, not a positive number of seconds")
        deadline = ctx.clock.time() + float(seconds)
    else:
        deadline = ctx.clock.time() + parse_duration(timeout) if isinstance(timeout, str) else None
    remind_after = state.remind_after
    review = {"kind": "review", "state": state.id, "token_hash": token_hash,
              "decisions": list(state.decisions or []), "show": show, "deadline": deadline,
              "remind_at": ctx.clock.time() + parse_duration(remind_after) if isinstance(remind_after, str) else None}
    ctx.emit("review_requested", state.id, show=show, decisions=review["decisions"],
             deadline=iso(deadline) if deadline else None)
    if state.notify:
        notify(ctx, state, state.notify, {"token": token, "run_id": ctx.id, "show": show,
                                          "decisions": review["decisions"],
                                          "deadline": iso(deadline) if deadline else None})
    return ctx.park("paused", review, None)


def timed_out(ctx, state):
    """The deadline passed undecided: ``on_timeout`` applies."""
    on_timeout = state.on_timeout or {"fail": "ReviewTimeout"}
    ctx.cursor.pending = None
    ctx.emit("review_timed_out", state.id)
    message = f"review '{state.id}' was not decided in time"
    if "goto" in on_timeout:
        ctx.cursor.error = run_error(ReviewTimeout, f"review '{state.id}' timed out", state.id, 1)
        return ctx.goto(on_timeout["goto"])
    if on_timeout["fail"] == ReviewTimeout.__name__:
        raise ReviewTimeout(message)
    raise FlowFailed(on_timeout["fail"], message)


def decide(ctx, token, decision, data, by) -> None:
    """Take ``decision`` (with ``data``, by ``by``) on the pending review if ``token`` is its token.
    Raises :class:`UsageError` (recorded as ``review_refused`` and committed) for no pending review,
    too many wrong tokens lately (:data:`TOKEN_ATTEMPTS` per :data:`TOKEN_WINDOW` s), a wrong or
    expired token, or a decision not offered. Not committed on success: the resume commits it."""
    c = ctx.cursor
    pending = c.pending or {}
    if pending.get("kind") != "review":
        ctx.emit("review_refused", c.state, reason="no review pending")
        ctx.commit()
        raise UsageError(f"run {ctx.id} has no pending review (the token may already have been used)")
    now = ctx.clock.time()
    recent = [t for t in pending.get("refused_at") or () if t > now - TOKEN_WINDOW]
    if len(recent) >= TOKEN_ATTEMPTS:  # guessing is throttled per run: even the right token waits
        until = recent[-TOKEN_ATTEMPTS] + TOKEN_WINDOW
        ctx.emit("review_refused", pending["state"], reason="throttled", until=iso(until))
        ctx.commit()
        raise UsageError(f"run {ctx.id} refuses review tokens until {iso(until)}: {len(recent)} wrong tokens "
                         f"in the last {TOKEN_WINDOW / 60:g} minutes",
                         hint=f"wait, or issue a new token: flowctl reviews --reissue {ctx.id}")
    if not hmac.compare_digest(hash_token(token), pending["token_hash"]):
        c.pending = dict(pending, refused_at=recent[-(TOKEN_ATTEMPTS - 1):] + [now])
        ctx.emit("review_refused", pending["state"], reason="wrong token",
                 attempts_left=max(0, TOKEN_ATTEMPTS - len(recent) - 1))
        ctx.commit()
        if hash_token(token) in (pending.get("replaced") or ()):  # a token reissue_token or a reminder replaced
            raise UsageError(f"this token of run {ctx.id} was replaced by a newer one (reissued, or sent again "
                             "with a reminder) and no longer works",
                             hint="use the newest token: the one flowctl reviews --reissue printed or the last "
                                  "notify sent")
        raise UsageError(f"wrong token for run {ctx.id}", hint="use the token printed when the run paused (or sent by "
                         f"its notify tool); if it is lost, issue a new one: flowctl reviews --reissue {ctx.id}")
    if ctx.review_expired():
        ctx.emit("review_refused", pending["state"], reason="expired")
        ctx.commit()
        raise UsageError(f"the review of run {ctx.id} expired at {iso(pending['deadline'])}",
                         hint=f"its on_timeout applies on the next: flowctl resume {ctx.id}")
    if decision not in pending["decisions"]:
        raise DecisionInvalid(f"decision '{decision}' is not one of {', '.join(pending['decisions'])}")
    data = check_data(ctx.project.states.get(pending["state"]), data)
    at = iso(ctx.clock.time())
    if ctx.secrets is not None:
        ctx.secrets.learn(data)
    c.review = {"decision": decision, "data": data, "by": by, "at": at, "state": pending["state"],
                "step": pending.get("step", c.step), "policy": bool(pending.get("policy")),
                "call": pending.get("call")}
    c.pending = dict(pending, decided=True, token_hash="used")
    ctx.emit("review_decided", pending["state"], decision=decision, data=data, by=by, at=at)


def check_data(state, data):
    """The data a decision on review ``state`` records: ``data`` as given, or ``{}`` for None when
    the state has a ``data_schema``. Raises :class:`ReviewDataInvalid` (its ``pointer`` into the
    data) when the schema rejects it. Records nothing; for a state without a schema (or a policy's
    review of a task) ``data`` is checked only for being JSON: NaN, an infinity or a lone surrogate
    (:func:`~flowctl.engine.payload.not_json`) is refused on every review, schema or not."""
    bad = not_json(data)
    if bad is not None:
        where, message = bad
        raise ReviewDataInvalid(f"the decision's data is not JSON at {where or '/'}: {message}", pointer=where or "/",
                                hint="give data that is JSON text: finite numbers, surrogates only in pairs")
    schema = getattr(state, "data_schema", None)
    if not schema:
        return data
    data = {} if data is None else data
    found = locate_problem(schema, data)
    if found is not None:
        where, message = found
        located = f" at {where}" if where is not None else ""
        raise ReviewDataInvalid(f"the decision's data does not match the data_schema of review '{state.id}'{located}: "
                                f"{message}", pointer=where or "/",
                                hint=f"give data (--data JSON or @file; the API's data) that satisfies the schema at "
                                     f"{state.where('data_schema')}")
    return data


def remind(ctx) -> None:
    """``remind_after`` passed with no decision: call the review's ``notify`` tool again with a new
    token (the old one stops working; only hashes are stored) and ``reminder: true``; committed."""
    pending = ctx.cursor.pending
    state = ctx.project.states[pending["state"]]
    token, token_hash = new_token()
    ctx.cursor.pending = dict(pending, token_hash=token_hash, reminded=True, replaced=_replaced(pending))
    ctx.emit("review_reminded", state.id)
    if state.notify:
        try:
            notify(ctx, state, state.notify, {
                "token": token, "run_id": ctx.id, "show": pending.get("show"), "decisions": pending.get("decisions"),
                "deadline": iso(pending["deadline"]) if pending.get("deadline") else None, "reminder": True})
        except Exception as exc:  # noqa: BLE001 - denied or failed: the old token stays the one that works
            ctx.cursor.pending = dict(pending, reminded=True)
            ctx.emit("review_reminder_failed", state.id, error=handler_names(exc)[0], message=str(exc))
    ctx.commit()


def reissue(ctx, by=None) -> str:
    """A new one-time token for the pending review (the old one stops working, refusals reset); committed."""
    token, token_hash = new_token()
    ctx.cursor.pending = dict(ctx.cursor.pending, token_hash=token_hash, refused_at=[],
                              replaced=_replaced(ctx.cursor.pending))
    ctx.emit("review_token_reissued", ctx.cursor.pending.get("state"), by=by)
    ctx.commit()
    return token


#: replaced tokens' hashes a pending review keeps, newest first, to tell a replaced token from a wrong one
REPLACED_KEPT = 5


def _replaced(pending: dict) -> list:
    """The hashes of the tokens replaced so far, the current one included (it is being replaced)."""
    return ([pending["token_hash"]] + list(pending.get("replaced") or ()))[:REPLACED_KEPT]


__all__ = ["run", "decide", "check_data", "remind", "reissue", "timed_out"]
