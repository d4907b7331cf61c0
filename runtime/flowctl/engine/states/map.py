"""``type: map``: one child run of ``flow`` per item of ``items`` (at most ``max_items``, default
10 000), its input ``item_input`` (with ``item`` and ``index`` in scope) or the item itself; with
``batch: {max_items: N}`` one child per N items on ``{"items": [...]}``, outputs flattened. The
response is the outputs in item order. The child runs themselves: :mod:`flowctl.engine.fanout`."""
from __future__ import annotations

from flowctl.engine.fanout import run_children
from flowctl.errors import ExpressionError, MaxStepsExceeded
from flowctl.expr.expressions import compile_expr
from flowctl.expr.scope import build

DEFAULT_MAX_ITEMS = 10_000


def run(ctx, state):
    return run_children(ctx, state, plans)


def plans(ctx, state) -> tuple:
    """``([(flow id, input)], max_concurrency (default 1), batched)``. Raises ``ExpressionError``
    when ``items`` is not a list, ``MaxStepsExceeded`` over ``max_items``."""
    scope = ctx.scope()
    items = compile_expr(state.items, state.where("items")).evaluate(scope)
    if not isinstance(items, list):
        raise ExpressionError(f"items of '{state.id}' gave {type(items).__name__}, not a list")
    cap = state.max_items or DEFAULT_MAX_ITEMS
    if len(items) > cap:
        raise MaxStepsExceeded(f"map '{state.id}' has {len(items)} items; max_items is {cap} (raise it on the state)")
    mapping = state.item_input
    inputs = [build(mapping, dict(scope, item=item, index=i), state.where("item_input")) if mapping is not None
              else item for i, item in enumerate(items)]
    batch = (state.batch or {}).get("max_items")
    if batch:
        found = [(state.flow, {"items": inputs[i:i + batch]}) for i in range(0, len(inputs), batch)]
    else:
        found = [(state.flow, item_input) for item_input in inputs]
    return found, state.max_concurrency or 1, bool(batch)


__all__ = ["run", "plans", "DEFAULT_MAX_ITEMS"]
