"""Ad-hoc runs: the run of a ``flowctl serve`` session, which has no flow (issue 19).

A session (``POST /v1/sessions``, :mod:`flowctl.server.sessions`) is stored as an ordinary run row
whose ``flow`` is the synthetic id ``session:<name>`` (:data:`PREFIX`): one run row, one audit log
with its hash chain, one checkpoint with the saga of the calls it made. Every reader of runs
(``flowctl runs``, ``trace``, ``audit verify``, ``GET /v1/runs``) needs nothing new: the flow id is
just text to them. What does need telling apart is whatever *drives* a run from its flow's states,
and a session has none: :func:`flow_of` gives the engine a stand-in :class:`SessionFlow` (no
states, no params, no input schema) where it would look the flow up, ``resume`` and ``recover``
leave a session alone (only the server that owns it acts in it), and ``cancel`` compensates its
saga newest first and ends it ``cancelled``, as for any run.

An open session is ``waiting`` with no due time (``available_at`` NULL: no worker claims it, no
recover continues it) and ``pending = {kind: "session", ...}``; closing it ends it ``succeeded``.
A call a policy sends to review pauses it: ``paused`` with the gate review pending (``kind:
review``, its ``session`` pending kept inside), so every reviews list shows it; :func:`decide` takes
the decision (``flowctl resume --token``, ``POST /v1/reviews/{id}/decide``, the console) and puts
the session back to ``waiting`` with the decision in ``cursor.review`` for the caller's repeat of
the call (:mod:`flowctl.server.sessions`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowctl.definition.model import Limits

#: The flow id of a session's run is ``session:<name>``.
PREFIX = "session:"


@dataclass(frozen=True)
class SessionFlow:
    """What the engine reads of a flow, for a run that has none: no states (``start`` empty), no
    params, no input schema. ``every_contract``: its calls may use any contract of the project, so
    every contract's ``sensitive`` fields are the run's (:func:`flowctl.engine.sensitive.flow_fields`)."""

    id: str
    version: Any = "1"
    description: str = "a flowctl serve session (ad-hoc tool calls, no flow)"
    start: str = ""
    input_schema: Any = None
    params: dict = field(default_factory=dict)
    output: Any = None
    limits: Limits = field(default_factory=Limits)
    transitions: tuple = ()
    on_error: tuple = ()
    file: str = ""
    every_contract: bool = True

    def transitions_from(self, state_id: str) -> tuple:
        return ()

    def where(self, *path) -> str:
        return "(a flowctl serve session)"


def is_session(flow_id) -> bool:
    """Whether a run's ``flow`` names a session (``session:<name>``)."""
    return isinstance(flow_id, str) and flow_id.startswith(PREFIX)


def flow_of(project, row):
    """The flow ``row``'s run is driven by: the project's flow, or a :class:`SessionFlow` for a
    session. Raises ``KeyError`` for a flow the definition does not have (as before)."""
    fid = row["flow"]
    if is_session(fid):
        return SessionFlow(fid)
    return project.flows[fid]


def decide(ctx, token, decision, data, by):
    """Decide the gate review a session is paused on (``ctx``: a :class:`RunContext` on its row):
    the token, throttle, deadline and decision checks of a review state
    (:func:`flowctl.engine.states.review.decide`, which raises ``UsageError``), then the session is
    ``waiting`` again with ``cursor.review`` = the decision (and the call's idempotency key) and the
    run's result is returned. Nothing is called here: the caller repeats the call to have it made."""
    from flowctl.engine.states import review

    c = ctx.cursor
    pending = c.pending or {}
    review.decide(ctx, token, decision, data, by)
    c.review = dict(c.review, key=pending.get("key"))
    c.pending = pending.get("session") or {"kind": "session", "name": "", "opened_by": ""}
    ctx.commit(status="waiting", available_at=None)
    return ctx.result()


__all__ = ["PREFIX", "SessionFlow", "decide", "flow_of", "is_session"]
