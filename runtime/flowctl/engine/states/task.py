"""``type: task``: one tool call (:func:`flowctl.engine.calls.call_tool`) with its retries (layer 1).

Retry (as ASL Retry): the first rule whose ``errors`` match decides; ``max_attempts`` counts every
call of the state, the first included, so ``max_attempts: 3`` is exactly three calls. The delay
before attempt *n+1* is ``min(interval * backoff**(n-1), max_delay)`` seconds, drawn uniformly
from ``[0, delay]`` with ``jitter: full``. A delay longer than the engine's ``max_inline_wait``
parks the run (status ``waiting``, ``pending: {kind: retry}``). An error no rule retries is
raised to the next layers (the state's and the flow's ``on_error``).
"""
from __future__ import annotations

from flowctl.engine.calls import call_tool, recover_inflight
from flowctl.engine.retry import retry_rule, with_retries


def run(ctx, state):
    """The tool's parsed output (the new ``response``), or ``PARKED`` (a long retry delay, a gate review)."""
    contract = ctx.project.resolve_tool(state.tool)
    c = ctx.cursor
    if c.inflight:
        recovered = recover_inflight(ctx, state, contract)
        if recovered is not None:
            return recovered
    return with_retries(ctx, state, lambda: call_tool(ctx, state, contract, c.attempt))


__all__ = ["run", "retry_rule"]
