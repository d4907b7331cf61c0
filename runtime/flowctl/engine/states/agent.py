"""``type: agent``: a bounded tool-calling loop. The model may call only the contracts in ``tools``,
each offered as a function whose parameters are the contract's ``input_schema``.

Every call the model asks for goes through the task path (:func:`flowctl.engine.calls.call_tool`):
the contract's input schema, the default-deny gate (a policy review pauses the run, as for a task),
the ``started`` record committed before a side effect, the idempotency key (the contract's, else
``RUN:STATE:VISIT:N`` for the N-th tool call of the visit), verify and the saga, so a run that
fails later compensates what the model did, newest first. An unknown tool, arguments that are not
an object or fail the schema, a denial and a tool error are sent back to the model as that call's
result (``is_error``) and recorded (``agent_tool_result``); the loop goes on. The loop ends when the
model answers without tool calls with JSON satisfying ``output_schema`` (that JSON is the
response); an invalid answer is re-asked at most ``max_reasks`` times (then ``SchemaMismatch``);
more than ``max_turns`` model calls or ``max_tool_calls`` tool calls raise ``AgentLimitExceeded``.

The transcript lives in the checkpoint (``cursor.extra["agent"]``: ``{state, visit, messages,
turns, tool_calls, reasks, pending, sent}``) and is committed after every model reply, so a run
resumed after a crash continues from the last recorded turn without asking the model again; a tool
call in flight is settled by its contract's verify (:func:`flowctl.engine.calls.recover_inflight`)
before anything is called again. A tool call's step row and events carry ``attempt`` N (its
ordinal in the visit); ``agent_tool_call`` names the model call (``call_id``) that asked for it.
Tool results sent to the model have the contract's ``sensitive`` fields redacted.

The model's final answer is a claim; what flowctl saw happen is in ``state.calls`` for the
transitions out of the state: ``[{tool, ok, error}]``, one per tool call of the visit in order
(``tool`` the contract id, or the unknown name the model used; ``error`` the error name sent back to
the model, e.g. ``PolicyDenied``). Route on it where the claim matters, e.g. ``when:
"response.resolution == 'refunded' && length(state.calls[?tool == 'refund_payment' && ok]) > `0`"``.
"""
from __future__ import annotations

import json

from flowctl.engine import modelcall
from flowctl.engine.calls import call_tool, recover_inflight
from flowctl.engine.context import PARKED
from flowctl.engine.prompts import render
from flowctl.engine.tools import DEFAULT_TIMEOUT
from flowctl.errors import AgentLimitExceeded, FlowctlError, PayloadTooLarge, SchemaMismatch, StepError, handler_names
from flowctl.definition import versions
from flowctl.models.replies import extract_json
from flowctl.store.audit import redact

KEY = "agent"
#: a tool result sent to the model is cut to this many characters
MAX_RESULT = 16_000


def functions(ctx, state) -> dict:
    """``{function name: (contract, schema)}`` of the tools the state offers; the name is the contract id."""
    found = ctx.project._resolved.get(("agent-tools", state.id))
    if found is None:
        found = {}
        for ref in state.tools:
            contract = ctx.project.resolve_tool(ref)
            if contract is None:
                continue
            params = dict(contract.input_schema or {"type": "object"})
            params.setdefault("type", "object")
            found[contract.id] = (contract, {"name": contract.id, "parameters": params,
                                             "description": contract.description or f"{contract.ref}"})
        ctx.project._resolved[("agent-tools", state.id)] = found
    return found


def run(ctx, state):
    """The final answer's JSON (the new ``response``), or ``PARKED`` (a gate review, a long retry delay)."""
    c = ctx.cursor
    visit = c.visits.get(state.id, 1)
    t = c.extra.get(KEY)
    if not isinstance(t, dict) or t.get("state") != state.id or t.get("visit") != visit:
        messages = render(ctx.project, state, ctx.scope())
        schema = state.output_schema or {}
        messages.insert(0, {"role": "system", "content": modelcall.schema_instruction(schema, agent=True)})
        t = c.extra[KEY] = {"state": state.id, "visit": visit, "messages": messages, "turns": 0, "tool_calls": 0,
                            "reasks": 0, "pending": [], "sent": 0, "reask": None}
    profile = modelcall.profile_of(ctx, state)
    provider = modelcall.provider_of(ctx, state, profile)
    try:
        return modelcall.with_retries(ctx, state, lambda: _loop(ctx, state, t, profile, provider))
    except Exception:
        c.extra.pop(KEY, None)  # the visit is over (the error layers decide what follows)
        raise


def _loop(ctx, state, t, profile, provider):
    c = ctx.cursor
    tools = functions(ctx, state)
    offered = [schema for _contract, schema in tools.values()]
    if c.inflight and c.inflight.get("state") == state.id and t["pending"]:
        call = t["pending"][0]
        contract = ctx.project.resolve_tool(c.inflight["tool"])
        output = recover_inflight(ctx, state, contract)
        if output is not None:  # verify says it happened: that is the call's result
            _finish_call(ctx, state, t, call, contract, output, None)
        else:  # it did not happen: called again with the same key, as the same call (not a new one for the gate)
            call["again"] = True
    while True:
        while t["pending"]:
            call = t["pending"][0]
            outcome = _tool_call(ctx, state, t, call, tools)
            if outcome is PARKED:
                return PARKED
        if t["turns"] >= state.max_turns:
            raise AgentLimitExceeded(f"'{state.id}' made {t['turns']} model calls (max_turns {state.max_turns}) "
                                     "without a final answer")
        req = modelcall.request(state, profile, t["messages"], tools=offered, index=t["turns"], visit=t["visit"])
        reply, took = modelcall.ask(ctx, state, provider, req)
        t["turns"] += 1
        sent, t["sent"] = t["sent"], len(t["messages"])
        reask, t["reask"] = t["reask"], None
        if reply.tool_calls:
            modelcall.record(ctx, state, provider, profile, req, reply, took, sent_from=sent, reask=reask)
            if t["tool_calls"] + len(reply.tool_calls) > state.max_tool_calls:
                raise AgentLimitExceeded(f"'{state.id}' asked for {t['tool_calls'] + len(reply.tool_calls)} tool "
                                         f"calls (max_tool_calls {state.max_tool_calls})")
            asked = modelcall.call_id(ctx, state, req.index)
            t["messages"].append({"role": "assistant", "content": reply.text, "tool_calls": [
                {"id": x.id, "name": x.name, "arguments": x.arguments if x.arguments is not None else {}}
                for x in reply.tool_calls]})
            for x in reply.tool_calls:
                t["tool_calls"] += 1
                t["pending"].append({"id": x.id, "name": x.name, "arguments": x.arguments, "text": x.arguments_text,
                                     "n": t["tool_calls"], "by": asked})
            ctx.commit()  # the turn is recorded: a crash from here on never asks the model for it again
            continue
        value, problem = extract_json(reply.text, state.output_schema)
        modelcall.record(ctx, state, provider, profile, req, reply, took, sent_from=sent, parsed=value,
                         problem=problem, reask=reask)
        if problem is None:
            c.extra.pop(KEY, None)
            return value
        if t["reasks"] >= state.max_reasks:
            raise SchemaMismatch(f"the final answer of '{state.id}' does not match its output_schema after "
                                 f"{t['reasks']} re-ask{'s' if t['reasks'] != 1 else ''}: {problem}")
        t["reasks"] += 1
        t["reask"] = problem
        t["messages"] += [{"role": "assistant", "content": reply.text}, modelcall.reask_message(problem)]
        ctx.commit()


def _tool_call(ctx, state, t, call, tools):
    """Run one pending tool call through the task path; its result (or error) joins the transcript."""
    c = ctx.cursor
    found = tools.get(call["name"])
    ctx.emit("agent_tool_call", state.id, call["n"], call_id=call["by"], tool_call_id=call["id"], name=call["name"],
             tool=found[0].ref if found else None, arguments=call["arguments"])
    if found is None:
        return _finish_call(ctx, state, t, call, None, None, (
            "UnknownTool", f"no tool '{call['name']}'; the tools are: {', '.join(sorted(tools)) or 'none'}"))
    contract = found[0]
    if not isinstance(call["arguments"], dict):
        return _finish_call(ctx, state, t, call, contract, None, (
            "SchemaMismatch", f"the arguments of {call['name']} are not a JSON object: {call['text'][:200]!r}"))
    if not call.pop("again", False):
        c.gate_granted = None  # a new call, never a technical retry of the last one (rate and dedupe count it)
    key = None if contract.idempotency_key else f"{ctx.id}:{state.id}:{t['visit']}:{call['n']}"
    try:
        output = call_tool(ctx, state, contract, call["n"], tool_input=call["arguments"], key=key,
                           timeout=contract.timeout or DEFAULT_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - the model is told, and the loop goes on
        if (isinstance(exc, FlowctlError) and not isinstance(exc, StepError)) or isinstance(exc, PayloadTooLarge):
            raise
        return _finish_call(ctx, state, t, call, contract, None, (handler_names(exc)[0], str(exc) or type(exc).__name__))
    if output is PARKED:  # a gate review: the run waits; the approved call is made when it resumes
        return PARKED
    return _finish_call(ctx, state, t, call, contract, output, None)


def _finish_call(ctx, state, t, call, contract, output, error):
    if error is None:
        shown = redact(output, contract.sensitive) if contract is not None else output
        text = json.dumps(shown, ensure_ascii=False, default=str)
    else:
        text = json.dumps({"error": error[0], "message": error[1]}, ensure_ascii=False)
    if len(text) > MAX_RESULT:
        text = text[:MAX_RESULT] + " …(cut)"
    ctx.emit("agent_tool_result", state.id, call["n"], call_id=call["by"], tool_call_id=call["id"], name=call["name"],
             ok=error is None, error=error[0] if error else None, message=error[1] if error else None)
    info = ctx.cursor.state_info
    if info is not None:  # what happened, for the transitions out (``state.calls``): not the model's claim
        info["calls"] = info.get("calls", []) + [
            {"tool": contract.id if contract is not None else call["name"], "ok": error is None,
             "error": error[0] if error else None}]
    t["messages"].append({"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": text,
                          "is_error": error is not None})
    t["pending"].pop(0)
    return None


def tool_names(state) -> list:
    """The function names an agent state offers (contract ids), in file order."""
    return [versions.split_ref(ref)[0] for ref in state.tools]


__all__ = ["run", "functions", "tool_names"]
