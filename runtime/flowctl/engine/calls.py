"""One tool call of a state, start to finish: input schemas, the gate, the ``started`` record,
invoke, output schema, verify, the saga; and recovering a call whose outcome was never recorded.

Crash safety: before a side-effecting tool is invoked, the step's ``started`` record and the
events so far are committed, and the checkpoint notes the call as ``inflight``. A run resumed with
a call in flight asks the contract's ``verify(input, None, call)`` whether the effect happened: a
dict answer is taken as the tool's output, ``True`` as "happened, output unknown" (``{}``), and a
false answer re-invokes the tool with the **same** idempotency key. Without ``verify`` the tool is
re-invoked with the same key (at-least-once; the key makes it safe).

A side-effecting call that **times out** may have acted all the same (before its deadline, or
still in its thread after it): its verify (every side-effecting contract has one) is asked then
too (:func:`_unrecorded_effect`), and an effect it confirms joins the saga, so a failed run's compensation
undoes it (``compensate`` gets the output verify returned, else None). A later attempt of the same
call (same idempotency key) that succeeds replaces that entry: one entry per effect.

Used by the task state (:mod:`flowctl.engine.states.task`), a review's ``notify`` and a handler's
``fallback``. :func:`call_tool` returns the tool's parsed output, or
:data:`~flowctl.engine.context.PARKED` when the gate paused the run for a review.
"""
from __future__ import annotations

import copy
import os
import dataclasses
import json
import time

from flowctl.definition.runtime_schemas import check_instance
from flowctl.engine import saga, spans
from flowctl.engine.context import PARKED
from flowctl.engine.eventtext import (flat_text, invoked_frame, invoked_text, key_text, succeeded_head,
                                      succeeded_text)
from flowctl.engine.evidence import take_snapshot
from flowctl.engine.gatecall import gate, guarded
from flowctl.engine.outputs import parse_output
from flowctl.engine.payload import FIT_STRING, flat_copy
from flowctl.engine.tokens import hash_token
from flowctl.engine.tools import DEFAULT_TIMEOUT, ToolCall, call_with_timeout
from flowctl.errors import BoundaryViolation, ExpressionError, PolicyDenied, SchemaMismatch, ToolTimeout, error_names, handler_names
from flowctl.expr.expressions import compile_expr
from flowctl.expr.scope import compile_mapping
from flowctl.store.audit import redact
from flowctl.telemetry import tracing


def run_fallback(ctx, state, ref):
    """Invoke ``ref`` (a fallback tool) with the state's input; its output becomes ``response``
    (or ``PARKED``: the fallback waits for its own gate review)."""
    contract = ctx.project.resolve_tool(ref)
    ctx.emit("fallback_used", state.id, ctx.cursor.attempt, tool=contract.ref)
    return call_tool(ctx, state, contract, ctx.cursor.attempt, fallback=True)


def notify(ctx, state, ref, payload):
    """Call a review's ``notify`` tool with ``{token, run_id, show, decisions, deadline}`` through the
    same path as a task's tool: the contract's input schema, the gate, the ``started`` record, verify
    and the saga. The token is never stored: it is redacted from every event, step row and the
    checkpoint. Its idempotency key is ``RUN:STATE:VISIT:notify:TOKEN-HASH-PREFIX`` (one per token
    issued, so a reminder or a re-notify after a crash is a new call)."""
    found = ctx.project.resolve_tool(ref)
    contract = dataclasses.replace(found, sensitive=tuple(found.sensitive) + ("token",))
    visit = ctx.cursor.visits.get(state.id, 1)
    key = f"{ctx.id}:{state.id}:{visit}:notify:{hash_token(payload['token'])[:12]}"
    return call_tool(ctx, state, contract, 1, tool_input=payload, stored_input=redact(payload, ("token",)),
                     purpose="notify", key=key,  # a reminder's payload says reminder: true
                     timeout=found.timeout or DEFAULT_TIMEOUT)


def recover_notify(ctx, state) -> None:
    """A review's notify call was started and its outcome never recorded (the process died): ask its
    verify whether it happened (then it joins the saga), and forget it; the review then issues a new
    token and notifies again (the old token was never stored, so it cannot be honoured)."""
    c = ctx.cursor
    inflight = c.inflight
    contract = ctx.project.resolve_tool(inflight["tool"])
    call = ToolCall(ctx.id, inflight["step"], state.id, inflight["attempt"], inflight["idempotency_key"],
                    None, inflight["tool"])
    answer = _verify(ctx, contract, inflight["input"], None, call) if contract and contract.verify else False
    ctx.emit("step_recovered", state.id, inflight["attempt"], tool=inflight["tool"],
                idempotency_key=inflight["idempotency_key"], happened=bool(answer), action="notify again with a new token")
    if answer and contract is not None:
        _complete(ctx, state, contract, inflight["attempt"], inflight["input"],
                  answer if isinstance(answer, dict) else {}, None, call, 0.0, recovered=True)
    c.inflight = None


def _timeout(ctx, state, contract) -> float:
    t = state.timeout
    if isinstance(t, dict):
        value = compile_expr(t["expr"], state.where("timeout")).evaluate(ctx.scope())
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ExpressionError(f"timeout of '{state.id}' evaluated to {value!r}, not a positive number of seconds")
        return float(value)
    return t or contract.timeout or DEFAULT_TIMEOUT


def _key(ctx, state, contract, tool_input) -> str:
    if contract.idempotency_key:
        scope = dict(ctx.scope(), input=tool_input, run_input=ctx.row["input"])
        value = compile_expr(contract.idempotency_key, contract.where("idempotency_key")).evaluate(scope)
        if value not in (None, ""):
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    visit = ctx.cursor.visits.get(state.id, 1)
    return f"{ctx.id}:{state.id}:{visit}"


def _input_builder(project, state):
    """``state.input`` compiled once (cached on the project): a function ``scope -> tool input``."""
    key = ("input", state.id)
    found = project._resolved.get(key)
    if found is None:
        found = project._resolved[key] = (compile_mapping(state.input, state.where("input"))
                                          if state.input is not None else (lambda scope: {}))
    return found


def _checker(schema):
    """``schema`` compiled to ``fn(instance) -> problem or None`` (None: no schema). The trivial
    schemas (``{type: object}``, with ``required`` names) answer "valid" by an ``isinstance`` check
    and a lookup per name; anything else, and every problem, goes to :func:`check_instance`."""
    if not schema:
        return None
    if isinstance(schema, dict) and schema.get("type") == "object" and set(schema) <= {"type", "required"}:
        names = schema.get("required", [])
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            names = tuple(names)
            if not names:
                return lambda instance: None if type(instance) is dict else check_instance(schema, instance)
            return lambda instance: (None if type(instance) is dict and all(n in instance for n in names)
                                     else check_instance(schema, instance))
    return lambda instance: check_instance(schema, instance)


class StepPlan:
    """What one state's call of one contract needs, worked out once per engine and definition (``ctx.plans``, shared by the engine's runs:
    :meth:`flowctl.engine.engine.Engine.step_caches`): the
    input mapping compiled, the three schema checks (:func:`_checker`), the tool function (resolved
    at its first call, before the gate), the timeout when it is a constant (None: an expression)."""

    __slots__ = ("contract", "build", "state_input", "contract_input", "output", "fn", "timeout", "keyed", "what",
                 "plain", "invoked", "succeeded")

    def __init__(self, ctx, state, contract):
        self.contract = contract
        self.build = _input_builder(ctx.project, state)
        self.state_input = _checker(state.input_schema)
        self.contract_input = _checker(contract.input_schema)
        self.output = _checker(contract.output_schema)
        self.fn = None
        t = state.timeout
        self.timeout = None if isinstance(t, dict) else (t or contract.timeout or DEFAULT_TIMEOUT)
        self.keyed = bool(contract.idempotency_key)
        self.what = f"tool {contract.ref} in '{state.id}'"
        #: a read-only call the gate does not check, with nothing to redact, snapshot or evaluate per
        #: call (None: not known until the first call has resolved the function and asked the gate)
        self.plain = (None if not (contract.side_effecting or contract.sensitive or contract.snapshot or self.keyed
                                   or self.timeout is None) else False)
        #: the fixed parts of the step's event texts (flowctl.engine.eventtext), or None
        self.invoked = invoked_frame(contract.ref, self.timeout) if self.timeout is not None else None
        self.succeeded = succeeded_head(contract.ref)


def plan(ctx, state, contract) -> StepPlan:
    """The :class:`StepPlan` of ``state`` calling ``contract`` in this run (made at its first call)."""
    key = (state.id, contract.ref)
    found = ctx.plans.get(key)
    if found is None or found.contract is not contract:  # a notify's contract is a fresh copy each time
        found = ctx.plans[key] = StepPlan(ctx, state, contract)
    return found


def call_tool(ctx, state, contract, attempt: int, *, fallback: bool = False, tool_input=None,
              stored_input=None, purpose: str | None = None, key: str | None = None, timeout: float | None = None):
    """One call of ``contract`` from ``state``: input schema(s), gate, ``started`` record, invoke,
    output schema, verify, saga. ``tool_input`` given (a review's notify payload) replaces the
    state's input mapping; ``stored_input`` is what the checkpoint keeps of it instead (the payload
    without its token); ``purpose`` is recorded on the tool_invoked event (``notify``)."""
    p = plan(ctx, state, contract)
    if p.plain and tool_input is None and not fallback and not purpose and not key and not timeout \
            and ctx.secrets is None:
        return call_plain(ctx, state, p, attempt)
    c = ctx.cursor
    built = tool_input is None  # a notify payload is given, not built from the state's input mapping
    if built:
        tool_input = p.build(ctx.scope())
    if ctx.secrets is not None:  # before anything records it (schema and policy messages quote it)
        ctx.secrets.learn(tool_input)
    if built and not fallback and p.state_input is not None:
        problem = p.state_input(tool_input)
        if problem:
            raise SchemaMismatch(f"input of '{state.id}' does not match its input_schema {problem}")
    if p.contract_input is not None:
        problem = p.contract_input(tool_input)
        if problem:
            raise SchemaMismatch(f"input of '{state.id}' does not match contract {contract.ref} {problem}")
    fn = p.fn
    if fn is None:  # resolved once per engine and definition, before the gate (it follows the function) and any record
        fn = ctx.tool_fns.get((contract.ref, contract.entrypoint))
        if fn is None:
            fn = ctx.tool_fns[(contract.ref, contract.entrypoint)] = ctx.engine.tool_function(
                contract, "entrypoint", ctx.tools_folder)
        p.fn = fn
    if gate(ctx, state, contract, attempt, tool_input, fn, purpose=purpose, fallback=fallback) is PARKED:
        return PARKED
    if p.plain is None:
        p.plain = not guarded(ctx, contract, fn)[1]
    if not key:
        key = (_key(ctx, state, contract, tool_input) if p.keyed
               else f"{ctx.id}:{state.id}:{ctx.cursor.visits.get(state.id, 1)}")
    timeout = timeout or p.timeout or _timeout(ctx, state, contract)
    deadline = ctx.clock.time() + timeout
    span = headers = None
    if ctx.span is not None:  # tracing on: the call's span, its context handed to the tool
        span, headers = spans.tool(ctx, contract.ref, attempt)
    call = ToolCall(ctx.id, c.step, state.id, attempt, key, deadline, contract.ref, headers)
    # a run with secrets redacts every record it stores by name and value (flowctl.engine.sensitive)
    # (a notify payload's token is sensitive by name only, so it is always redacted by name here)
    shown_input = (tool_input if (ctx.secrets is not None and purpose is None) or not contract.sensitive
                   else redact(tool_input, contract.sensitive))
    if contract.snapshot and contract.side_effecting:  # committed with the started record, before the effect
        take_snapshot(ctx, contract, tool_input, call, "before")
    input_text = flat_text(tool_input)  # not None: flat, small and plain, its stored text made at once
    # the tool's own copy; flat means small, so the event need not be measured
    given = dict(tool_input) if input_text is not None else flat_copy(tool_input)
    extra = {"purpose": purpose} if purpose else {}
    # provenance of the definition (flow version, digest, git commit) is in run_started: a run is pinned to it
    text = (invoked_text(contract.ref, input_text, key, timeout)
            if input_text is not None and shown_input is tool_input and not extra else None)
    ctx.emit("tool_invoked", state.id, attempt, owned=True if given is not None and len(key) <= FIT_STRING
                else (shown_input, key), text=text, tool=contract.ref, input=shown_input,
                idempotency_key=key, timeout_s=timeout, **extra)
    if contract.side_effecting:
        c.inflight = {"step": c.step, "attempt": attempt, "state": state.id, "tool": contract.ref,
                         "input": tool_input if stored_input is None else stored_input, "idempotency_key": key}
        ctx.step_rows.append(_step_row(c, attempt, state, contract, key, "started", shown_input, None, ctx.clock.time()))
        ctx.commit()
    if given is None:
        given = copy.deepcopy(tool_input)
    started = time.perf_counter()
    returned = False
    try:  # the tool gets its own copy: whatever it does to it cannot change the run or the record
        raw = call_with_timeout(fn, (given, call), timeout, p.what, contract.side_effecting)
        returned = True
        output, raw_text, owned, output_text = parse_output(raw, contract)
    except Exception as exc:  # noqa: BLE001
        if span is not None:
            tracing.end(span, outcome="failed", error=exc)
        record_failure(ctx, state, contract, attempt, exc, started, key, shown_input, tool_input, call,
                tool_input if stored_input is None else stored_input, returned=returned)
        raise
    if span is not None:
        tracing.end(span, outcome="ok")
    took = (time.perf_counter() - started) * 1000
    return _complete(ctx, state, contract, attempt, tool_input, output, raw_text, call, took, owned=owned,
                     stored_input=stored_input, output_text=output_text, check=p.output or False)


def record_failure(ctx, state, contract, attempt, exc, started, key, shown_input, tool_input, call, kept_input=None,
                   returned: bool = False) -> None:
    """The tool raised ``exc``, or (``returned``) returned an output that is not JSON: its names for
    the handlers, ``tool_failed``, and for a side effect the ``failed`` step record (and, if the
    contract asks, compensation of a partial effect; after a timeout, or an output that could not be
    kept, the effect that may have happened, or did, in the saga: :func:`_unrecorded_effect`)."""
    _tag_tool_error(exc)
    took = (time.perf_counter() - started) * 1000
    where = {} if _is_engine_error(exc) else raised_at(exc, ctx.project.root)
    ctx.emit("tool_failed", state.id, attempt, tool=contract.ref, error=handler_names(exc)[0], message=str(exc),
             duration_ms=round(took, 3), **where)
    if contract.side_effecting:
        c = ctx.cursor
        c.inflight = None
        ctx.step_rows.append(_step_row(c, attempt, state, contract, key, "failed", shown_input, None, None,
                                       ctx.clock.time()))
        if returned:  # it acted and returned: its effect is undone with the run's, as any effect
            _unrecorded_effect(ctx, state, contract, tool_input, call, tool_input if kept_input is None else kept_input,
                       after="output not kept")
        elif contract.compensate_on_failure:
            _undo_partial(ctx, state, contract, tool_input, call)
        elif isinstance(exc, ToolTimeout):
            _unrecorded_effect(ctx, state, contract, tool_input, call, tool_input if kept_input is None else kept_input)


def _unrecorded_effect(ctx, state, contract, tool_input, call, kept_input, after: str = "timeout") -> None:
    """A side-effecting call timed out, so whether it acted is not known: its ``verify`` is asked
    (as after a crash), and an effect it confirms joins the saga when the contract can undo it.
    ``after="crash"``: a call a dead process left in flight, for a run stopped without
    compensating here (:func:`inflight_to_saga`). ``after="output not kept"``: the call returned, but an output the record cannot hold (not
    JSON): it acted, so without a ``verify`` (a definition run unchecked) its effect is taken as
    happened (breaker finding: it was never undone). Recorded as ``step_recovered`` (``after``, ``happened``, ``action``)."""
    undoable = bool(contract.compensate) and contract.compensate != "none"
    answer = (_verify(ctx, contract, tool_input, None, call) if contract.verify
              else after == "output not kept")
    action = ("nothing to undo" if not answer else "in the saga" if undoable
              else "kept: the contract declares no compensate")
    ctx.emit("step_recovered", state.id, call.attempt, tool=contract.ref, idempotency_key=call.idempotency_key,
             after=after, happened=bool(answer), action=action)
    if answer and undoable:
        _join_saga(ctx, state, contract, kept_input, answer if isinstance(answer, dict) else None, call.idempotency_key)


def _join_saga(ctx, state, contract, kept_input, output, key) -> None:
    """Push the effect of this call onto the saga, replacing an entry of the same call (same tool
    and idempotency key: an attempt that timed out, then one that succeeded, are one effect)."""
    c = ctx.cursor
    if any(e.get("idempotency_key") == key for e in c.saga):
        c.saga[:] = [e for e in c.saga if not (e.get("idempotency_key") == key and e.get("tool") == contract.ref)]
    c.saga.append({"run_id": ctx.id, "state": state.id, "step": c.step, "tool": contract.ref, "input": kept_input,
                   "output": output, "idempotency_key": key, "at": ctx.clock.time()})


def call_plain(ctx, state, p, attempt, scope=None, visit=None):
    """:func:`call_tool` for a plain call (:attr:`StepPlan.plain`: read-only, no gate check, nothing
    to redact or snapshot, a constant timeout, the default idempotency key) of a run without
    secrets: the same checks, records and copies, without the branches that cannot apply.
    ``scope``: the run's scope as it stands (made here when None); ``visit``: the state's visit
    number (read from the cursor when None). The lean step (:mod:`flowctl.engine.lean`) passes both."""
    contract = p.contract
    tool_input = p.build(ctx.scope() if scope is None else scope)
    if p.state_input is not None:
        problem = p.state_input(tool_input)
        if problem:
            raise SchemaMismatch(f"input of '{state.id}' does not match its input_schema {problem}")
    if p.contract_input is not None:
        problem = p.contract_input(tool_input)
        if problem:
            raise SchemaMismatch(f"input of '{state.id}' does not match contract {contract.ref} {problem}")
    c = ctx.cursor
    sid, ref, timeout = state.id, contract.ref, p.timeout
    key = f"{ctx.id}:{sid}:{c.visits.get(sid, 1) if visit is None else visit}"
    span = headers = None
    if ctx.span is not None:  # tracing on: the call's span, its context handed to the tool
        span, headers = spans.tool(ctx, ref, attempt)
    call = ToolCall(ctx.id, c.step, sid, attempt, key, ctx.clock.time() + timeout, ref, headers)
    data = {"tool": ref, "input": tool_input, "idempotency_key": key, "timeout_s": timeout}
    input_text = flat_text(tool_input)
    frame = p.invoked
    k = key_text(key) if input_text is not None and frame is not None else None
    if k is not None:  # flat, small and plain: its stored text made at once, the tool's copy shallow
        given = dict(tool_input)
        ctx.emit_known("tool_invoked", sid, attempt, f'{frame[0]}{input_text},"idempotency_key":{k}{frame[1]}', data)
    else:
        given = dict(tool_input) if input_text is not None else flat_copy(tool_input)
        ctx.emit("tool_invoked", sid, attempt, owned=True if given is not None and len(key) <= FIT_STRING
                 else (tool_input, key), **data)
        if given is None:
            given = copy.deepcopy(tool_input)
    started = time.perf_counter()
    try:  # the tool gets its own copy: whatever it does to it cannot change the run or the record
        output, raw_text, owned, output_text = parse_output(call_with_timeout(p.fn, (given, call), timeout, p.what),
                                                            contract)
    except Exception as exc:  # noqa: BLE001
        if span is not None:
            tracing.end(span, outcome="failed", error=exc)
        record_failure(ctx, state, contract, attempt, exc, started, key, tool_input, tool_input, call)
        raise
    if span is not None:
        tracing.end(span, outcome="ok")
    took = round((time.perf_counter() - started) * 1000, 3)
    problem = p.output(output) if p.output is not None else None
    if raw_text is not None:
        ctx.emit("tool_succeeded", sid, attempt, strict=True, owned=owned, tool=ref, output=output, duration_ms=took,
                 raw=raw_text)
    elif output_text is not None and p.succeeded is not None:  # took: a finite float, as _number formats it
        ctx.emit_known("tool_succeeded", sid, attempt, f'{p.succeeded}{output_text},"duration_ms":{took!r}}}',
                       {"tool": ref, "output": output, "duration_ms": took})
    else:
        ctx.emit("tool_succeeded", sid, attempt, strict=True, owned=owned, tool=ref, output=output, duration_ms=took)
    if problem:
        raise SchemaMismatch(f"output of {ref} in '{sid}' does not match its output_schema {problem}")
    return output


def _complete(ctx, state, contract, attempt, tool_input, output, raw_text, call, took_ms, recovered=False,
              owned=False, stored_input=None, output_text=None, check=None):
    """``check``: the output schema's check (:func:`_checker`; False: there is none), else made here."""
    c = ctx.cursor
    if ctx.secrets is not None:
        ctx.secrets.learn(output)
    if check is None:
        check = _checker(contract.output_schema)
    problem = check(output) if check else None
    if contract.side_effecting and problem is None and contract.verify and not recovered:
        ok = _verify(ctx, contract, tool_input, output, call)
        if not ok:  # the output the tool gave is evidence too: kept with the verdict
            ctx.emit("verify_failed", state.id, attempt, tool=contract.ref, verified=False,
                        output=redact(output, contract.sensitive))
            take_snapshot(ctx, contract, tool_input, call, "after")
            ctx.step_rows.append(_step_row(c, attempt, state, contract, call.idempotency_key, "failed",
                                              redact(tool_input, contract.sensitive), redact(output, contract.sensitive),
                                              None, ctx.clock.time()))
            _undo_partial(ctx, state, contract, tool_input, call, output=output, checked=True)
            c.inflight = None
            raise BoundaryViolation(f"verify of {contract.ref} did not confirm the effect of '{state.id}' "
                                    "(see the verify_failed event); it was compensated")
        ctx.emit("verify_passed", state.id, attempt, tool=contract.ref, verified=True)
    if contract.snapshot and contract.side_effecting:  # after verify (a failed verify took it above)
        take_snapshot(ctx, contract, tool_input, call, "after")
    lean = ctx.secrets is not None and stored_input is None  # by name and value when stored; a notify by name here
    shown = output if lean or not contract.sensitive else redact(output, contract.sensitive)
    if contract.side_effecting:  # the effect happened: it joins the saga before anything else can fail
        c.inflight = None
        ctx.step_rows.append(_step_row(c, attempt, state, contract, call.idempotency_key, "succeeded",
                                          tool_input if lean else redact(tool_input, contract.sensitive),
                                          shown, None, ctx.clock.time()))
        if contract.compensate and contract.compensate != "none":
            _join_saga(ctx, state, contract, tool_input if stored_input is None else stored_input, output,
                       call.idempotency_key)
    data = {"tool": contract.ref, "output": shown, "duration_ms": round(took_ms, 3)}
    text = None
    if recovered:  # verify confirmed the effect after a crash but gave no output: the response is {}
        data["output_unknown"] = True
    elif raw_text is not None:
        data["raw"] = raw_text if not contract.sensitive else None
    elif output_text is not None and shown is output:
        text = succeeded_text(contract.ref, output_text, data["duration_ms"])
    # an output the tool cannot change any more (parsed or copied by _parse_output) may be encoded when read
    ctx.emit("tool_succeeded", state.id, attempt, strict=True, owned=owned, text=text, **data)
    if problem and recovered:  # the effect is in the saga; what the flow reads next is missing
        raise SchemaMismatch(f"output of {contract.ref} in '{state.id}' is unknown after a crash: verify confirmed the "
                             f"effect but returned true, not the output, and the output_schema needs it {problem}; "
                             "return the output dict from verify to keep it")
    if problem:
        raise SchemaMismatch(f"output of {contract.ref} in '{state.id}' does not match its output_schema {problem}")
    return output


def recover_inflight(ctx, state, contract):
    """A side-effecting call was started and its outcome never recorded (the process died)."""
    c = ctx.cursor
    inflight = c.inflight
    contract = ctx.project.resolve_tool(inflight["tool"]) or contract
    call = ToolCall(ctx.id, inflight["step"], state.id, inflight["attempt"], inflight["idempotency_key"],
                    None, inflight["tool"])
    answer = _verify(ctx, contract, inflight["input"], None, call) if contract.verify else False
    ctx.emit("step_recovered", state.id, inflight["attempt"], tool=inflight["tool"],
                idempotency_key=inflight["idempotency_key"], happened=bool(answer),
                action="recorded" if answer else "re-invoke with the same idempotency key")
    if not answer:
        c.inflight = None
        c.attempt = inflight["attempt"]
        return None  # the key is derived from the same input and visit: it is the same key
    if isinstance(answer, dict):
        return _complete(ctx, state, contract, inflight["attempt"], inflight["input"], answer, None, call, 0.0)
    # verify said it happened but cannot give the output: the effect is recorded (and joins the saga)
    # with the response {}, tool_succeeded says output_unknown, and trace shows the step as recovered.
    # If the output_schema rejects {}, the step fails with SchemaMismatch here, naming the cause,
    # rather than a later state failing on a field that was never there.
    return _complete(ctx, state, contract, inflight["attempt"], inflight["input"], {}, None, call, 0.0,
                     recovered=True)


def undo_inflight(ctx) -> None:
    """Cancelling a run whose process died mid-call: if verify says the call happened, undo it."""
    c = ctx.cursor
    inflight = c.inflight
    contract = ctx.project.resolve_tool(inflight["tool"])
    if contract is None or not contract.verify:
        return
    state = ctx.project.states[inflight["state"]]
    call = ToolCall(ctx.id, inflight["step"], inflight["state"], inflight["attempt"], inflight["idempotency_key"],
                    None, inflight["tool"])
    answer = _verify(ctx, contract, inflight["input"], None, call)
    ctx.emit("step_recovered", state.id, inflight["attempt"], tool=inflight["tool"], happened=bool(answer),
                action="compensate" if answer else "nothing to undo")
    if answer:
        _undo_partial(ctx, state, contract, inflight["input"], call, output=answer if isinstance(answer, dict) else None,
                      checked=True)
    c.inflight = None


def inflight_to_saga(ctx) -> None:
    """Stopping, without compensating it here, a run whose process died mid-call (a sibling
    failed: the parent compensates this run's saga): the call is verified, and an effect it
    confirms joins the saga (``step_recovered`` with ``after: crash``)."""
    c = ctx.cursor
    inflight, c.inflight = c.inflight, None
    contract = ctx.project.resolve_tool(inflight["tool"])
    if contract is None:
        return
    call = ToolCall(ctx.id, inflight["step"], inflight["state"], inflight["attempt"], inflight["idempotency_key"],
                    None, inflight["tool"])
    _unrecorded_effect(ctx, ctx.project.states[inflight["state"]], contract, inflight["input"], call,
                       inflight["input"], after="crash")


def _verify(ctx, contract, tool_input, output, call):
    """verify's answer: ``True``/``False``, or a dict (the tool's output, after a crash). Anything
    else, or an exception, counts as "cannot tell" and so as not happened (recorded as such)."""
    fn = ctx.engine.tool_function(contract, "verify", ctx.tools_folder)
    try:
        answer = call_with_timeout(fn, (copy.deepcopy(tool_input), copy.deepcopy(output), call),
                                   contract.timeout or DEFAULT_TIMEOUT, f"verify of {contract.ref}")
    except Exception as exc:  # noqa: BLE001 - a verify that cannot answer is a "no"
        ctx.emit("verify_failed", call.state, call.attempt, tool=contract.ref, error=type(exc).__name__,
                    message=f"verify raised, so the effect counts as not happened: {exc}")
        return False
    if isinstance(answer, (bool, dict)):
        return answer
    ctx.emit("verify_failed", call.state, call.attempt, tool=contract.ref, error=SchemaMismatch.__name__,
                message=f"verify returned {type(answer).__name__}; it must return a bool (or the output dict)")
    return False


def _undo_partial(ctx, state, contract, tool_input, call, *, output=None, checked=False) -> None:
    """Compensate one call now: after verify failed, or (``compensate_on_failure``) after invoke raised."""
    if not contract.compensate or contract.compensate == "none":
        return
    if not checked:
        if not contract.verify or not _verify(ctx, contract, tool_input, output, call):
            return
    entry = {"state": state.id, "step": ctx.cursor.step, "tool": contract.ref, "input": tool_input,
             "output": output, "idempotency_key": call.idempotency_key, "at": ctx.clock.time()}
    ctx.emit("compensation_started", state.id, call.attempt, tool=contract.ref, reason="boundary")
    try:
        saga.undo_once(ctx, contract, entry, call)
    except Exception as exc:  # noqa: BLE001
        saga.record_residue(ctx, state.id, contract.ref, f"{type(exc).__name__}: {exc}", call.idempotency_key,
                            call.attempt)
    else:
        ctx.emit("compensation_succeeded", state.id, call.attempt, tool=contract.ref)


def _tag_tool_error(exc) -> None:
    """Give a tool's exception the names handlers match: its own, its bases, and ToolError."""
    if getattr(exc, "flowctl_names", None):
        return
    names = error_names(exc)
    if not isinstance(exc, ToolTimeout) and "ToolError" not in names and not _is_engine_error(exc):
        names.append("ToolError")
    try:
        exc.flowctl_names = names
    except AttributeError:
        pass


_FLOWCTL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raised_at(exc, root) -> dict:
    """``{"at": "orchestration/tools/m.py:12 in charge"}``: the innermost frame of ``exc``'s
    traceback outside flowctl (the tool's own code, or a library it called), its file relative to
    the project ``root`` when inside it; ``{}`` when every frame is flowctl's."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_FLOWCTL_DIR + os.sep):
            found = tb
        tb = tb.tb_next
    if found is None:
        return {}
    path = os.path.abspath(found.tb_frame.f_code.co_filename)
    rel = os.path.relpath(path, str(root)) if path.startswith(os.path.abspath(str(root)) + os.sep) else path
    return {"at": f"{rel}:{found.tb_lineno} in {found.tb_frame.f_code.co_name}"}


def _is_engine_error(exc) -> bool:
    return isinstance(exc, (SchemaMismatch, PolicyDenied, BoundaryViolation))


def _step_row(c, attempt, state, contract, key, status, tool_input, output, started_at=None, finished_at=None):
    row = {"step_no": c.step, "attempt": attempt, "state": state.id, "tool": contract.ref, "idempotency_key": key,
           "status": status, "input": tool_input, "output": output}
    if started_at is not None:
        row["started_at"] = started_at
    if finished_at is not None:
        row["finished_at"] = finished_at
    return row


__all__ = ["call_tool", "call_plain", "parse_output", "record_failure", "run_fallback", "notify", "recover_notify", "recover_inflight", "undo_inflight"]
