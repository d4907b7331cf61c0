"""A state's ``retry`` rules around one call: the first rule matching the error by name (or ``*``)
decides; ``max_attempts`` counts every call; the delay is ``interval × backoff^(attempt-1)``, capped
by ``max_delay``, with full jitter if asked; a delay over the engine's ``max_inline_wait`` parks the
run ``waiting`` and the state is entered again when it is due. A shorter delay is slept in process
after a commit (the failed attempt, the next attempt's number and its due time, ``pending: {kind:
retry, due}``), so a process stopped during it loses no attempt: the run resumed waits out the rest
and makes the next attempt, never the first one again. A pause request that commit hands back
(asked while the failed attempt ran) pauses the run there, the retry kept under the pause; a
worker's cancel or stop (its ``halt`` flag) wins over it, and the worker acts on the run there. Used by the task state and by the
model call of llm and agent states (:mod:`flowctl.engine.modelcall`)."""
from __future__ import annotations

import random

from flowctl.engine.context import PARKED
from flowctl.errors import handler_names


def retry_rule(state, exc):
    """The first of the state's ``retry`` rules that matches ``exc`` by name (or ``*``), or None."""
    names = handler_names(exc)
    for rule in state.retry:
        if "*" in rule.errors or any(n in rule.errors for n in names):
            return rule
    return None


def with_retries(ctx, state, attempt_fn, failed: Exception | None = None):
    """``attempt_fn()`` (it reads ``ctx.cursor.attempt`` for the attempt number) under the state's
    ``retry`` rules: its result, ``PARKED`` (waiting out a long delay), or the error no rule retries.
    ``failed``: the error of the attempt already made at ``ctx.cursor.attempt`` (the lean step's
    first call, :mod:`flowctl.engine.lean`), decided on before ``attempt_fn`` is called again."""
    c = ctx.cursor
    pending = c.pending
    if pending is not None and pending.get("kind") == "retry" and "due" in pending and failed is None:
        parked = _wait_out(ctx, pending)  # a process stopped while it waited for this attempt
        if parked is not None:
            return parked
    while True:
        attempt = c.attempt
        if failed is None:
            try:
                return attempt_fn()
            except Exception as exc:  # noqa: BLE001 - retried, or raised to the handler layers
                failed = exc
        exc, failed = failed, None
        rule = retry_rule(state, exc)
        if rule is None or attempt >= rule.max_attempts:
            raise exc
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
        if delay > 0:  # the failed attempt and the next one's number are committed before the wait
            c.pending = {"kind": "retry", "state": state.id, "attempt": attempt + 1, "due": ctx.clock.time() + delay}
            ctx.commit()
            halt = getattr(ctx.engine, "halt", None)  # a worker's checkpoint flag: its cancel or stop comes first
            if halt is not None and halt(ctx.id):  # (the run stays running here; the worker acts on it)
                return PARKED
            if ctx.pause_request is not None:  # asked during the failed attempt: pause here, not after the rest
                ctx.pause_now()  # the retry is kept under the pause; resume waits out its rest
                return PARKED
            ctx.clock.sleep(delay)
            c.pending = None


def _wait_out(ctx, pending):
    """The rest of an inline retry delay whose process stopped during it (``pending["due"]``, epoch
    seconds): slept here, or the run parked ``waiting`` until then when it is longer than this
    engine waits in process. ``PARKED``, or None once it is over (``pending`` cleared)."""
    left = pending["due"] - ctx.clock.time()
    if left > ctx.engine.max_inline_wait:
        return ctx.park("waiting", dict(pending), pending["due"])
    if left > 0:
        ctx.clock.sleep(left)
    ctx.cursor.pending = None
    return None


__all__ = ["retry_rule", "with_retries"]
