"""``type: subflow``: one child run of ``flow`` on the state's ``input`` mapping (``{}`` without
one); the response is its output. The child run itself: :mod:`flowctl.engine.fanout`."""
from __future__ import annotations

from flowctl.engine.fanout import run_children
from flowctl.expr.scope import build


def run(ctx, state):
    return run_children(ctx, state, plans)


def plans(ctx, state) -> tuple:
    """``([(flow id, input)], 1, batched=False)``."""
    child_input = build(state.input, ctx.scope(), state.where("input")) if state.input is not None else {}
    return [(state.flow, child_input)], 1, False


__all__ = ["run", "plans"]
