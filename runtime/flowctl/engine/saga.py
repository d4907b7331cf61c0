"""Compensation (the saga): completed side effects undone newest first.

Each entry of the run's ``saga`` stack (``{state, step, tool, input, output, idempotency_key,
at}``) is undone by its contract's ``compensate`` callable, with the contract's
``compensate_retry`` policy (default: one attempt). Each undo is committed on its own, so a crash
mid-compensation resumes with the entries still left. Compensations may therefore run more than
once after a crash: make them idempotent (``call.idempotency_key`` is the original step's key).
A compensation that still fails is recorded as residue (``compensation_failed`` event and
``RunResult.residue``), never swallowed, and the rest of the stack is still undone.
"""
from __future__ import annotations

import copy

from flowctl.definition.durations import parse_duration
from flowctl.errors import CompensationFailed
from flowctl.engine import spans
from flowctl.engine.tools import ToolCall, call_with_timeout
from flowctl.telemetry import tracing


def compensate(ctx, reason: str) -> None:
    stack = ctx.cursor.saga
    while stack:
        entry = stack[-1]
        contract = _contract(ctx.project, entry["tool"])
        span = headers = None
        if ctx.span is not None:  # tracing on: a span per undo, its context handed to the compensate function
            span, headers = spans.compensation(ctx, entry["tool"], entry["state"])
        call = ToolCall(entry.get("run_id", ctx.id), entry["step"], entry["state"], 1, entry["idempotency_key"], None,
                        entry["tool"], headers)
        ctx.emit("compensation_started", entry["state"], tool=entry["tool"], reason=reason,
                    idempotency_key=entry["idempotency_key"])
        try:
            undo_once(ctx, contract, entry, call)
        except Exception as exc:  # noqa: BLE001 - residue, recorded below
            failure = CompensationFailed(f"compensating {entry['tool']} of '{entry['state']}' failed: "
                                         f"{type(exc).__name__}: {exc}")
            record_residue(ctx, entry["state"], entry["tool"], str(failure), entry["idempotency_key"])
            tracing.end(span, outcome="failed", error=failure)
        else:
            ctx.emit("compensation_succeeded", entry["state"], tool=entry["tool"])
            tracing.end(span, outcome="compensated")
        stack.pop()
        ctx.commit()


def record_residue(ctx, state_id: str, tool: str, error: str, key: str, attempt: int | None = None) -> None:
    """A compensation failed for good: keep ``{state, tool, error, idempotency_key}`` in the run's
    ``residue`` (and ``RunResult.residue``) and record a ``compensation_failed`` event."""
    residue = {"state": state_id, "tool": tool, "error": error, "idempotency_key": key}
    ctx.cursor.residue.append(residue)
    ctx.emit("compensation_failed", state_id, attempt, code=CompensationFailed.code, **residue)


def undo_once(ctx, contract, entry, call) -> None:
    """Call ``compensate`` with its retry policy; raise the last error if every attempt fails."""
    fn = ctx.engine.tool_function(contract, "compensate", ctx.tools_folder)
    policy = contract.compensate_retry or {}
    attempts = int(policy.get("max_attempts", 1))
    delay = parse_duration(policy.get("interval", "1s"))
    backoff = float(policy.get("backoff", 2.0))
    cap = parse_duration(policy["max_delay"]) if policy.get("max_delay") else None
    for attempt in range(1, attempts + 1):
        try:
            # copies: what the tool does to them cannot change the saga, the audit log or a literal
            call_with_timeout(fn, (copy.deepcopy(entry["input"]), copy.deepcopy(entry["output"]), call),
                              contract.timeout or 30.0, f"compensate of {contract.ref}", settle=True)
            return
        except Exception:
            if attempt == attempts:
                raise
            wait = min(delay, cap) if cap else delay
            ctx.emit("compensation_retry", entry["state"], attempt, tool=contract.ref, delay_s=wait)
            ctx.clock.sleep(wait)
            delay *= backoff


def _contract(project, ref: str):
    tool_id, _, version = ref.partition("@")
    for c in project.contracts.get(tool_id, ()):
        if c.version == version:
            return c
    raise CompensationFailed(f"contract {ref} is not in the run's definition")
