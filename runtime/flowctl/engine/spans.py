"""The engine's OpenTelemetry spans (:mod:`flowctl.telemetry.tracing`): where a run, a step, a tool
call, a gate decision and a model call begin and end.

Off (the default), :func:`begin` leaves ``ctx.span`` None and every other function here is skipped
by the caller's ``if ctx.span is not None`` — one attribute test per step. On, the run's trace
context is kept in its checkpoint (``cursor.extra["trace"]``, covered by the checkpoint's seal),
so a resume in another process or a worker continues the same trace, and each tool receives the
context of its own span as ``call.trace_context``.
"""
from __future__ import annotations

import time

from flowctl.telemetry import tracing

TRACE_KEY = "trace"


def begin(ctx) -> None:
    """Start the run's span for this drive (a new trace for a new run; under the stored context for
    a resumed one). Nothing when tracing is off."""
    if tracing.tracer() is None:
        return
    c = ctx.cursor
    stored = c.extra.get(TRACE_KEY)
    carrier = stored if isinstance(stored, dict) else None
    span, kept = tracing.run_span(ctx.id, ctx.flow.id, carrier, resumed=carrier is not None or c.step > 0)
    if carrier is None and kept:
        c.extra[TRACE_KEY] = kept  # written with the next commit
    ctx.span = span


def finish(ctx) -> None:
    """End the run's span with the run's status (and its error when it failed)."""
    row = ctx.row
    status = row.get("status")
    error = row.get("error") if status == "failed" else None
    tracing.end(ctx.span, outcome=status, error=error if isinstance(error, dict) else None)
    ctx.span = None


def step(ctx, state):
    """The span of one step of ``state`` (ended by :func:`end_step`)."""
    c = ctx.cursor
    span = tracing.child_span(ctx.span, f"flowctl.step {state.id}", {
        "flowctl.run_id": ctx.id, "flowctl.flow": ctx.flow.id, "flowctl.state": state.id,
        "flowctl.state_type": state.type, "flowctl.step": c.step + (0 if c.entered else 1)})
    ctx.step_span = span
    return span


def end_step(ctx, span, outcome: str, error=None) -> None:
    tracing.annotate(span, **{"flowctl.attempt": ctx.cursor.attempt})
    tracing.end(span, outcome=outcome, error=error)
    ctx.step_span = None


def tool(ctx, ref: str, attempt: int):
    """``(span, headers)`` of one tool invocation: the span and its W3C headers for the tool."""
    span = tracing.child_span(ctx.step_span or ctx.span, f"flowctl.tool {ref.split('@', 1)[0]}",
                              {"flowctl.tool": ref, "flowctl.attempt": attempt, "flowctl.run_id": ctx.id})
    return span, tracing.headers(span)


def compensation(ctx, tool_ref: str, state_id: str):
    """``(span, headers)`` of undoing one saga entry (``flowctl.compensate {tool}``)."""
    span = tracing.child_span(ctx.step_span or ctx.span, f"flowctl.compensate {tool_ref.split('@', 1)[0]}",
                              {"flowctl.tool": tool_ref, "flowctl.state": state_id, "flowctl.run_id": ctx.id})
    return span, tracing.headers(span)


def gate(ctx, contract, decision) -> None:
    """A span for one gate decision (the decision is instant: a zero-length span with its answer)."""
    span = tracing.child_span(ctx.step_span or ctx.span, f"flowctl.gate {contract.id}", {
        "flowctl.tool": contract.ref, "flowctl.decision": decision.outcome, "flowctl.policy": decision.policy,
        "flowctl.rule": decision.rule, "flowctl.warnings": len(decision.warnings) or None})
    tracing.end(span, outcome=decision.outcome)


def model(ctx, state, provider: str, model_name: str, usage: dict, latency_ms: float, *, reask=None,
          error=None) -> None:
    """A span for one model call that has returned (or failed) after ``latency_ms``; GenAI attributes."""
    parent = ctx.step_span or ctx.span
    if parent is None:
        return
    t = tracing.tracer()
    if t is None:
        return
    from opentelemetry import trace

    end_ns = time.time_ns()
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                  "gen_ai.request.model": model_name, "flowctl.state": state.id, "flowctl.run_id": ctx.id,
                  "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
                  "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0)}
    if reask:
        attributes["flowctl.reask"] = str(reask)[:200]
    span = t.start_span(f"chat {model_name}", context=trace.set_span_in_context(parent), attributes=attributes,
                        start_time=end_ns - int(latency_ms * 1e6))
    tracing.end(span, outcome="failed" if error is not None else "ok", error=error)


__all__ = ["begin", "finish", "step", "end_step", "tool", "gate", "model", "TRACE_KEY"]
