"""``type: pass``: apply the state's ``set`` to the context, then take a transition."""
from __future__ import annotations

from flowctl.expr.scope import apply_set


def run(ctx, state):
    """Apply ``set`` (raises ``PayloadTooLarge`` for a context over the payload limit); the response stays."""
    c = ctx.cursor
    c.context = apply_set(c.context, state.set, ctx.scope(), state.where("set"), check=ctx.check_size)
    return c.response


__all__ = ["run"]
