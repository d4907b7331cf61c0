"""``type: task``: one tool call (:func:`flowctl.engine.calls.call_tool`) with its retries (layer 1).

Retry (as ASL Retry): the first rule whose ``errors`` match decides; ``max_attempts`` counts every
call of the state, the first included, so ``max_attempts: 3`` is exactly three calls. The delay
before attempt *n+1* is ``min(interval * backoff**(n-1), max_delay)`` seconds, drawn uniformly
from ``[0, delay]`` with ``jitter: full``. A delay longer than the engine's ``max_inline_wait``
parks the run (status ``waiting``, ``pending: {kind: retry}``). An error no rule retries is
raised to the next layers (the state's and the flow's ``on_error``).
"""
from __future__ import annotations

import random

from flowctl.engine.calls import call_tool, recover_inflight
from flowctl.errors import handler_names


def run(ctx, state):
    """The tool's parsed output (the new ``response``), or ``PARKED`` (a long retry delay, a gate review)."""
    contract = ctx.project.resolve_tool(state.tool)
    c = ctx.cursor
    if c.inflight:
        recovered = recover_inflight(ctx, state, contract)
        if recovered is not None:
            return recovered
    while True:
        attempt = c.attempt
        try:
            return call_tool(ctx, state, contract, attempt)
        except Exception as exc:  # noqa: BLE001 - retried, or raised to the handler layers
            rule = retry_rule(state, exc)
            if rule is None or attempt >= rule.max_attempts:
                raise
            delay = min(rule.interval * rule.backoff ** (attempt - 1), rule.max_delay or float("inf"))
            if rule.jitter == "full":
                delay = random.uniform(0, delay)
            c.attempt = attempt + 1
            c.state_info = dict(c.state_info or {}, attempt=attempt + 1)
            ctx.emit("retry_scheduled", state.id, attempt, error=handler_names(exc)[0], message=str(exc),
                     delay_s=round(delay, 6), next_attempt=attempt + 1, rule=rule.line())
            if delay > ctx.engine.max_inline_wait:
                return ctx.park("waiting", {"kind": "retry", "state": state.id, "attempt": attempt + 1},
                                ctx.clock.time() + delay)
            ctx.clock.sleep(delay)


def retry_rule(state, exc):
    """The first of the state's ``retry`` rules that matches ``exc`` by name (or ``*``), or None."""
    names = handler_names(exc)
    for rule in state.retry:
        if "*" in rule.errors or any(n in rule.errors for n in names):
            return rule
    return None


__all__ = ["run", "retry_rule"]
