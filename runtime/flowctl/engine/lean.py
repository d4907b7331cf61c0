"""The lean step: a plain task state's whole step — enter, tool call, transition — run from one
plan made per state and definition, shared by an engine's runs (issue 17, target 1).

The general step goes through :meth:`Runner.enter <flowctl.engine.loop.Runner.enter>`, the task
handler and its retries (:mod:`flowctl.engine.states.task`), :func:`flowctl.engine.calls.call_tool`
and :func:`flowctl.engine.transitions.advance`: a dozen calls, each looking up again what this
state needs and building its own scope. For a state whose every step is the same shape, this
module does that work once (:class:`LeanStep`: the limits, the compiled input mapping and schema
checks, the tool and its timeout, the compiled transitions, the fixed parts of the event texts)
and runs the step as one function over one scope.

**What it records is exactly what the general path records**: the same four events
(``state_entered``, ``tool_invoked``, ``tool_succeeded``, ``transition_taken``) with the same data
and stored text, the same checkpoint and the same commits; it fails where the general path fails,
with the same error, after the same events (``tests/engine/test_lean.py`` runs every case both
ways, and the golden record of ``tests/engine/test_step_golden.py`` holds both to main's record).
An error of the tool call goes to the state's ``retry`` rules exactly as in the general path
(:func:`flowctl.engine.retry.with_retries`, told of the failed first attempt); every other error
is raised to the step loop's error layers.

**When it is taken** (:func:`lean_step`): a ``task`` state not yet entered, whose call is plain
(:attr:`flowctl.engine.calls.StepPlan.plain`: read-only, not checked by the gate, nothing to
redact, snapshot or evaluate per call — known once the state's first call in the engine has asked the gate), in a
run without secrets, without an OpenTelemetry span, with no call in flight. Anything else takes the
general path, which stays the definition of a step.
"""
from __future__ import annotations

from flowctl.engine import calls
from flowctl.engine.clock import iso
from flowctl.engine.context import PARKED
from flowctl.engine.eventtext import entered_text
from flowctl.engine.retry import with_retries
from flowctl.engine.transitions import advance
from flowctl.errors import MaxStepsExceeded, RunTimeout

# States of the path kept in the checkpoint. The checkpoint is re-encoded and rewritten on every step,
# so a longer tail makes each durable step of a long run slower; the audit log keeps all of them.
PATH_KEPT = 32


class LeanStep:
    """One plain task state's step, worked out once for the engine's runs of its flow: ``plan`` (its
    :class:`~flowctl.engine.calls.StepPlan`), the flow's limits and the state's fixed strings (its
    transitions are the general step's, :func:`flowctl.engine.transitions.advance`, compiled at the
    first transition taken: a ``when`` that does not compile fails the step after its call, as there)."""

    __slots__ = ("state", "plan", "sid", "kind", "limits")

    def __init__(self, ctx, state, plan):
        self.state = state
        self.plan = plan
        self.sid = state.id
        self.kind = state.type
        self.limits = ctx.flow.limits


def lean_step(ctx, state):
    """``state``'s :class:`LeanStep` (made at its first eligible step in any run of the flow), or None when
    this step takes the general path (see the module docstring)."""
    c = ctx.cursor
    if c.entered or c.inflight is not None or ctx.secrets is not None or ctx.span is not None:
        return None
    found = ctx.lean.get(state.id)
    if found is not None:
        return found or None
    if state.type != "task":
        ctx.lean[state.id] = False
        return None
    contract = ctx.project.resolve_tool(state.tool)
    if contract is None:
        ctx.lean[state.id] = False
        return None
    p = ctx.plans.get((state.id, contract.ref))
    if p is None or p.plain is None or p.fn is None:  # not called yet: the first call asks the gate
        return None
    ctx.lean[state.id] = found = LeanStep(ctx, state, p) if p.plain and p.timeout is not None else False
    return found or None


def enter(ctx, sid: str, kind: str, limits) -> tuple:
    """Enter state ``sid`` (of type ``kind``): count the step and the visit (raising
    :class:`MaxStepsExceeded` / :class:`RunTimeout` over the flow's ``limits``), append to the path,
    record ``state_entered``. Returns ``(step, visit, state info)``. The general step's
    :meth:`Runner.enter <flowctl.engine.loop.Runner.enter>` and the lean step both enter this way."""
    c = ctx.cursor
    step = c.step + 1
    if step > limits.max_steps:
        raise MaxStepsExceeded(f"run took {limits.max_steps} steps (limits.max_steps) and would enter '{sid}'")
    visits = c.visits.get(sid, 0) + 1
    if limits.max_visits is not None and visits > limits.max_visits:
        raise MaxStepsExceeded(f"state '{sid}' would be entered {visits} times (limits.max_visits {limits.max_visits})")
    now = ctx.clock.time()
    if limits.timeout is not None and now - ctx.row["created_at"] > limits.timeout:
        raise RunTimeout(f"run exceeded limits.timeout ({limits.timeout:g}s)")
    c.step = step
    c.visits = {**c.visits, sid: visits}  # a new dict: an earlier scope keeps its own
    path = c.path
    path.append(sid)
    if len(path) > PATH_KEPT:  # long loops: the checkpoint keeps the recent path only
        c.path_dropped = (c.path_dropped or 0) + len(path) - PATH_KEPT
        del path[:-PATH_KEPT]
    c.entered = True
    c.attempt = 1
    c.state_info = info = {"id": sid, "entered_at": iso(now), "attempt": 1}
    text = entered_text(kind, step, visits)
    if text is not None and ctx.secrets is None:
        ctx.emit_known("state_entered", sid, 1, text, {"type": kind, "step": step, "visit": visits})
    else:
        ctx.emit("state_entered", sid, 1, owned=True, text=text, type=kind, step=step, visit=visits)
    return step, visits, info


def run(ctx, lean: LeanStep):
    """Run one step of ``lean``'s state: ``PARKED`` (a retry delay parked the run), else None.
    Raises what the general step raises, at the same point (the step loop's error layers take it)."""
    c = ctx.cursor
    step, visits, info = enter(ctx, lean.sid, lean.kind, lean.limits)
    # --- the call (states.task.run -> calls.call_plain)
    row = ctx.row
    scope = {"input": row["input"], "params": row.get("params") or {}, "context": c.context, "response": c.response,
             "error": c.error, "review": c.review, "visits": c.visits, "state": info, "run": ctx.run_info,
             "item": None, "index": None}
    try:
        output = calls.call_plain(ctx, lean.state, lean.plan, 1, scope, visits)
    except Exception as exc:  # noqa: BLE001 - the state's retry rules, as with_retries applies them
        state = lean.state
        if not state.retry:
            raise
        contract = lean.plan.contract
        output = with_retries(ctx, state, lambda: calls.call_tool(ctx, state, contract, c.attempt), failed=exc)
        if output is PARKED:
            return PARKED
        scope = None  # a later attempt changed the state's info: advance makes the scope
    else:
        scope = dict(scope)  # the call's scope may be held by what it built: the transition's is its own
        scope["response"] = output
    # --- the transition; its conditions are compiled (or fail to) where the general step's are: here
    advance(ctx, lean.state, output, scope)
    return None


__all__ = ["LeanStep", "lean_step", "run"]
