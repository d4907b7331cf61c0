"""``type: llm``: one model step whose reply must be JSON satisfying the state's ``output_schema``.

The messages are rendered (:mod:`flowctl.engine.prompts`), a system message asks for JSON matching
the schema (the openai provider also asks the server for it: ``structured_output``), and the reply's
JSON is read tolerating prose around it (:func:`flowctl.models.replies.extract_json`). An invalid
reply is sent back with the validation error, at most ``max_reasks`` times (default 2); then
:class:`~flowctl.errors.SchemaMismatch` goes through the error layers. Provider errors
(``ToolThrottled``, ``ToolUnavailable``, ``ToolTimeout``) go through the state's ``retry`` first.
Each call is a ``model_called`` event (:mod:`flowctl.engine.modelcall`). Without an
``output_schema`` the response is the reply's JSON if it is JSON, else ``{"text": reply}``.
"""
from __future__ import annotations

from flowctl.engine import modelcall
from flowctl.engine.prompts import render
from flowctl.errors import SchemaMismatch
from flowctl.models.replies import extract_json


def run(ctx, state):
    """The parsed reply (the new ``response``), or ``PARKED`` (a long retry delay)."""
    profile = modelcall.profile_of(ctx, state)
    provider = modelcall.provider_of(ctx, state, profile)
    messages = render(ctx.project, state, ctx.scope())
    if state.output_schema is not None:
        messages.insert(0, {"role": "system", "content": modelcall.schema_instruction(state.output_schema, agent=False)})
    return modelcall.with_retries(ctx, state, lambda: _exchange(ctx, state, profile, provider, list(messages)))


def _exchange(ctx, state, profile, provider, messages):
    index, sent, reask = 0, 0, None
    while True:
        req = modelcall.request(state, profile, messages, index=index, visit=ctx.cursor.visits.get(state.id, 1))
        reply, took = modelcall.ask(ctx, state, provider, req)
        value, problem = extract_json(reply.text, state.output_schema)
        if state.output_schema is None and problem is not None:
            value, problem = {"text": reply.text}, None
        modelcall.record(ctx, state, provider, profile, req, reply, took, sent_from=sent, parsed=value,
                         problem=problem, reask=reask)
        if problem is None:
            return value
        if index >= state.max_reasks:
            raise SchemaMismatch(f"the reply of '{state.id}' does not match its output_schema after "
                                 f"{index} re-ask{'s' if index != 1 else ''}: {problem}")
        sent = len(messages)
        messages += [{"role": "assistant", "content": reply.text}, modelcall.reask_message(problem)]
        index += 1
        reask = problem


__all__ = ["run"]
