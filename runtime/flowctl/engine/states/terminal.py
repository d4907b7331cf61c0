"""The two ends: ``type: succeed`` and ``type: fail``."""
from __future__ import annotations

from flowctl.engine.context import DONE
from flowctl.errors import run_error
from flowctl.expr.expressions import compile_expr
from flowctl.expr.scope import build


def succeed(ctx, state):
    """End the run succeeded with the flow's ``output`` (the context when it has none)."""
    c = ctx.cursor
    flow = ctx.flow
    output = c.context if flow.output is None else build(flow.output, ctx.scope(), flow.where("output"))
    c.done = True
    c.error = None
    ctx.emit("run_succeeded", state.id, output=output)
    ctx.commit(status="succeeded", output=output)
    return DONE


def fail(ctx, state):
    """End the run failed with the state's ``error`` and ``cause``. It does not compensate unless
    the state says ``compensate: true`` (a handler may already have compensated). A state that
    re-raises the caught error (its ``error`` evaluates to the caught ``error.type``) keeps the
    state that error was raised in, so the run is blamed where it failed."""
    scope = ctx.scope()
    err_name = _literal_or_expr(state.error, scope, state.where("error"))
    cause = _literal_or_expr(state.cause, scope, state.where("cause")) or ""
    caught = ctx.cursor.error
    origin = caught.get("state") if isinstance(caught, dict) and caught.get("type") == str(err_name) else None
    err = run_error(str(err_name), str(cause), origin or state.id)
    if state.compensate and ctx.cursor.saga:
        ctx.cursor.after_compensation = {"fail": err, "compensate": True}  # the step loop compensates, then fails
        ctx.commit()
        return DONE
    return ctx.finish_failed(err)


def _literal_or_expr(value, scope, where):
    if isinstance(value, dict) and "expr" in value:
        return compile_expr(value["expr"], where).evaluate(scope)
    return value


__all__ = ["succeed", "fail"]
