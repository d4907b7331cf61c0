"""``type: parallel``: one child run per flow in ``branches``, each on the same input (the state's
``input`` mapping, or the run's input); the response is their outputs in branch order.
The child runs themselves: :mod:`flowctl.engine.fanout`."""
from __future__ import annotations

from flowctl.engine.fanout import run_children
from flowctl.expr.scope import build


def run(ctx, state):
    return run_children(ctx, state, plans)


def plans(ctx, state) -> tuple:
    """``([(flow id, input)], max_concurrency (default: all), batched=False)``."""
    scope = ctx.scope()
    one_input = build(state.input, scope, state.where("input")) if state.input is not None else dict(scope["input"] or {})
    found = [(flow, one_input) for flow in state.branches]
    return found, state.max_concurrency or len(found), False


__all__ = ["run", "plans"]
