"""``type: wait``: sleep for ``duration`` or until ``until`` (an expression giving an ISO-8601 time).

A wait up to the engine's ``max_inline_wait`` sleeps in process, its due time committed first
(``pending: {kind: wait, state, due}``), so that a process stopped during it resumes the same wait;
a longer one parks the run (``waiting``, the same ``pending``, due at that epoch second).
"""
from __future__ import annotations

from flowctl.definition.durations import parse_duration
from flowctl.engine.clock import iso
from flowctl.errors import ExpressionError
from flowctl.expr.expressions import _parse_time, compile_expr


def run(ctx, state):
    """The response unchanged once the time has come, or ``PARKED``. Raises ``ExpressionError``
    when ``until`` does not give a time."""
    c = ctx.cursor
    due = (c.pending or {}).get("due")
    if due is None:
        if state.duration is not None:
            due = ctx.clock.time() + parse_duration(state.duration)
        else:
            value = compile_expr(state.until, state.where("until")).evaluate(ctx.scope())
            try:
                due = _parse_time(value).timestamp()
            except (ValueError, TypeError) as exc:
                raise ExpressionError(f"until of '{state.id}' gave {value!r}, not an ISO-8601 time ({exc})") from None
        ctx.emit("wait_started", state.id, due=iso(due))
    delay = due - ctx.clock.time()
    if delay > ctx.engine.max_inline_wait:
        return ctx.park("waiting", {"kind": "wait", "state": state.id, "due": due}, due)
    if delay > 0:  # its due time committed first: a process stopped during the wait resumes it, not anew
        c.pending = {"kind": "wait", "state": state.id, "due": due}
        ctx.commit()
        ctx.clock.sleep(delay)
    c.pending = None
    return c.response


__all__ = ["run"]
