"""One model call of an llm or agent state, and its record: the ``model_called`` event.

:func:`ask` sends a :class:`~flowctl.models.base.ModelRequest` to the state's profile and
:func:`record` writes what came back, once the reply is read::

    model_called  {call_id, provider, profile, model, messages, messages_from, digest, raw, content,
                   parsed, problem, reask, tool_calls, usage: {input_tokens, output_tokens}, cost,
                   latency_ms, index}

``content`` is the reply's text; ``messages`` are the messages sent that the previous call of this state visit had not sent
(``messages_from``: the index of the first; all of them on the first call), so a long agent loop
stores each message once; ``digest`` is the sha256 of the whole conversation as sent (as stored,
for a run with secrets: after redaction). Events are redacted by the run's sensitive-value machinery
(:mod:`flowctl.engine.sensitive`) when they are emitted. A call that raised is recorded as
``model_failed`` ``{call_id, provider, model, error, message, latency_ms}`` and its error raised
through the state's ``retry`` (:func:`flowctl.engine.retry.with_retries`) and the error layers.

Token budget: every call's usage is added to the checkpoint (``cursor.extra["model_usage"]``:
``{tokens, cost}`` for the run); past the flow's ``limits.tokens`` or ``limits.cost`` the call
raises :class:`~flowctl.errors.BudgetExceeded` after it is recorded.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

from flowctl.engine import spans
from flowctl.engine.retry import with_retries
from flowctl.errors import BudgetExceeded, ToolError, handler_names
from flowctl.models import ModelRequest, provider_for
from flowctl.store.audit import encode_data

#: overrides the profile of every state whose ``model`` is ``default``
PROFILE_ENV = "FLOWCTL_MODEL_PROFILE"
DEFAULT_TIMEOUT = 60.0


def profile_of(ctx, state):
    """The :class:`~flowctl.definition.model.ModelProfile` ``state.model`` names (``default`` may be
    overridden by ``FLOWCTL_MODEL_PROFILE``). Raises ToolError ``ModelProfileMissing``."""
    name = state.model
    if name == "default" and os.environ.get(PROFILE_ENV):
        name = os.environ[PROFILE_ENV]
    models = ctx.project.models
    profile = models.profiles.get(name) if models is not None else None
    if profile is None:
        known = ", ".join(sorted(models.profiles)) if models is not None else "none (no orchestration/models.yaml)"
        raise ToolError("ModelProfileMissing", f"no model profile '{name}' for '{state.id}' (profiles: {known})")
    return profile


def provider_of(ctx, state, profile):
    """The provider for ``state``: a flow test's scripted replies for it (``engine.model_mocks``,
    ``{state id: [reply, …]}``) win over its profile. Under a flow test (``model_mocks`` set) only a
    ``fake`` profile answers a state the test does not mock, unless ``engine.model_provider(ctx, state,
    profile)`` gives a provider for it (a cassette, recorded or replayed: :mod:`flowctl.testing.cassettes`)."""
    mocks = getattr(ctx.engine, "model_mocks", None)
    if mocks is not None:
        from flowctl.models.fake import FakeProvider

        if state.id in mocks or f"{state.id}#{ctx.cursor.visits.get(state.id, 1)}" in mocks:  # (a replay's: by visit)
            return FakeProvider(mocks)
        chooser = getattr(ctx.engine, "model_provider", None)  # a flow test's cassette (flowctl.testing.cassettes)
        found = chooser(ctx, state, profile) if chooser is not None else None
        if found is not None:
            return found
        if profile.provider != "fake":
            raise ToolError("Model.NotMocked", f"the case mocks no model reply for '{state.id}' (its profile "
                            f"'{profile.name}' is {profile.provider}; flow tests never call a real model "
                            "unless recording a cassette)",
                            hint=f"add models: {{{state.id}: [{{json: ...}}]}} to the case, or record the real "
                                 "model's replies once: flowctl test --record")
    return provider_for(profile)


def request(state, profile, messages, *, tools=(), index=0, visit=1) -> ModelRequest:
    """The request of one call of ``state`` on ``profile``."""
    structured = profile.structured_output if profile.structured_output is not None else profile.provider == "openai"
    timeout = state.timeout if isinstance(state.timeout, (int, float)) else None
    return ModelRequest(model=profile.model, messages=messages, output_schema=state.output_schema, tools=list(tools),
                        timeout=float(timeout or profile.timeout or DEFAULT_TIMEOUT),
                        max_output_tokens=state.max_output_tokens or profile.max_output_tokens,
                        temperature=profile.temperature, structured=structured and not tools,
                        state=state.id, index=index, visit=visit)


def call_id(ctx, state, index: int) -> str:
    """A model call's id in its run: ``STATE:VISIT:N`` (N the 1-based call of that visit)."""
    return f"{state.id}:{ctx.cursor.visits.get(state.id, 1)}:{index + 1}"


def ask(ctx, state, provider, req: ModelRequest):
    """``(reply, latency_ms)`` of one call; a raised error is recorded (``model_failed``) and raised."""
    started = time.perf_counter()
    try:
        reply = provider.complete(req)
    except Exception as exc:  # noqa: BLE001 - recorded, then through retry and the error layers
        took = (time.perf_counter() - started) * 1000
        ctx.emit("model_failed", state.id, ctx.cursor.attempt, call_id=call_id(ctx, state, req.index),
                 provider=provider.name, model=req.model, error=handler_names(exc)[0], message=str(exc),
                 latency_ms=round(took, 3))
        raise
    return reply, (time.perf_counter() - started) * 1000


def digest(ctx, messages) -> str:
    """sha256 (hex) of the conversation as stored (redacted first for a run with secrets)."""
    shown = ctx.secrets.scrub(messages) if ctx.secrets is not None else messages
    return hashlib.sha256(encode_data(shown).encode("utf-8")).hexdigest()


def record(ctx, state, provider, profile, req, reply, latency_ms, *, sent_from=0, parsed=None, problem=None,
           reask=None) -> dict:
    """Emit ``model_called`` for one answered call (see the module docstring), add its usage to
    the run's and raise :class:`BudgetExceeded` past the flow's limits. Returns the event's data."""
    usage = {"input_tokens": int(reply.usage.get("input_tokens") or 0),
             "output_tokens": int(reply.usage.get("output_tokens") or 0)}
    cost = price(ctx.project, profile.model or reply.model, usage)
    data = {"call_id": call_id(ctx, state, req.index), "provider": provider.name, "profile": profile.name,
            "model": reply.model or req.model, "messages": req.messages[sent_from:], "messages_from": sent_from,
            "digest": digest(ctx, req.messages), "raw": reply.raw, "content": reply.text, "parsed": parsed, "problem": problem,
            "reask": reask, "usage": usage, "latency_ms": round(latency_ms, 3), "index": req.index}
    if ctx.secrets is not None:  # emit scrubs every field but a raw reply (text it drops): scrubbed here
        data["raw"] = ctx.secrets.scrub(reply.raw)
    if reply.tool_calls:
        data["tool_calls"] = [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in reply.tool_calls]
    if cost is not None:
        data["cost"] = cost
    ctx.emit("model_called", state.id, ctx.cursor.attempt, **data)
    if ctx.span is not None:
        spans.model(ctx, state, provider.name, data["model"] or "", usage, latency_ms, reask=reask)
    _spend(ctx, usage, cost)
    return data


def price(project, model, usage) -> float | None:
    """The cost of ``usage`` on ``model`` by the prices of ``orchestration/models.yaml`` (per million
    tokens), or None when the model has no price."""
    prices = project.models.prices if project.models is not None else {}
    p = prices.get(model) if model else None
    if p is None:
        return None
    return round(usage["input_tokens"] * p["input"] / 1e6 + usage["output_tokens"] * p["output"] / 1e6, 9)


def _spend(ctx, usage, cost) -> None:
    c = ctx.cursor
    spent = dict(c.extra.get("model_usage") or {"tokens": 0, "cost": 0.0})
    spent["tokens"] = spent.get("tokens", 0) + usage["input_tokens"] + usage["output_tokens"]
    spent["cost"] = round(spent.get("cost", 0.0) + (cost or 0.0), 9)
    c.extra["model_usage"] = spent
    limits = ctx.flow.limits
    tokens, money = getattr(limits, "tokens", None), getattr(limits, "cost", None)
    if tokens is not None and spent["tokens"] > tokens:
        raise BudgetExceeded(f"the run's model calls used {spent['tokens']} tokens, over limits.tokens {tokens}")
    if money is not None and spent["cost"] > money:
        raise BudgetExceeded(f"the run's model calls cost {spent['cost']:g}, over limits.cost {money:g}")


def schema_instruction(schema, *, agent: bool) -> str:
    """The system message that asks for JSON satisfying ``schema``."""
    lead = ("When you have finished (calling tools as needed), answer" if agent else "Answer")
    return (f"{lead} with only a JSON value, no prose, that satisfies this JSON Schema:\n"
            + json.dumps(schema, sort_keys=True))


def reask_message(problem: str) -> dict:
    """The user message that sends an invalid reply back with its validation error."""
    return {"role": "user", "content": f"Your reply was not valid: {problem}. Reply again with only the JSON value."}


__all__ = ["profile_of", "provider_of", "request", "ask", "record", "price", "with_retries", "call_id", "digest",
           "schema_instruction", "reask_message", "PROFILE_ENV"]
