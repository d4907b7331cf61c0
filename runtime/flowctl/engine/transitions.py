"""Taking a business transition (layer 3): the first one leaving the state whose ``when`` holds
(JMESPath truthiness, :func:`flowctl.expr.scope.truthy`), in file order; its ``set`` applied."""
from __future__ import annotations

from flowctl.engine.payload import FIT_STRING
from flowctl.errors import NoTransitionMatched
from flowctl.expr.expressions import RECORDER, compile_expr
from flowctl.expr.scope import compile_set, truthy
from flowctl.store.audit import encode_data


class Move:
    """A business transition ready to run: its ``when`` and ``set`` compiled once."""

    __slots__ = ("to", "when", "evaluate", "apply_set", "line", "short")

    def __init__(self, t):
        self.to, self.when, self.line = t.to, t.when, t.line()
        self.short = len(t.when or "") <= FIT_STRING
        # an ExpressionError names the transition and the line of the `when`, or of the `set` key that failed
        edge = f"the transition {t.source} → {t.to}"
        self.evaluate = compile_expr(t.when, f"{t.where('when')} ({edge})").evaluate if t.when is not None else None
        self.apply_set = compile_set(t.set, lambda key: f"{t.where('set', key)} (set of {key!r} in {edge})")


def moves(project, flow, state_id) -> tuple:
    """The transitions leaving ``state_id`` in file order (first match wins), compiled; cached on
    the project (per flow and state)."""
    key = ("moves", flow.id, state_id)
    found = project._resolved.get(key)
    if found is None:
        found = project._resolved[key] = tuple(Move(t) for t in flow.transitions_from(state_id))
    return found


def taken_texts(project, flow, state_id) -> dict:
    """``{results of the conditions evaluated: transition_taken's stored text}`` of ``state_id``'s
    small outcomes (every result true, false or null), cached on the project per flow and state."""
    key = ("taken", flow.id, state_id)
    found = project._resolved.get(key)
    if found is None:
        found = project._resolved[key] = {}
    return found


def advance(ctx, state, response, scope=None) -> None:
    """``response`` becomes the scope's; take the first transition that holds (a
    ``transition_taken`` event with every condition evaluated) and commit. Raises
    :class:`NoTransitionMatched`, or what a ``when`` or ``set`` raises. ``scope``: the run's scope
    with ``response`` in it already (made here when None: the lean step, :mod:`flowctl.engine.lean`,
    passes its own)."""
    c = ctx.cursor
    c.response = response
    if scope is None:
        scope = ctx.scope()
    found = ctx.plans.get(state.id)  # (moves, texts) of this state, looked up once per engine and flow
    if found is None:
        found = ctx.plans[state.id] = (moves(ctx.project, ctx.flow, state.id),
                                       taken_texts(ctx.project, ctx.flow, state.id))
    chosen = None
    evaluated = []
    results = []
    small = True  # every result a boolean or null and every condition short: the event is small
    for move in found[0]:
        if move.when is None:
            chosen = move
            evaluated.append({"when": None, "result": True})
            results.append(True)
            break
        value = move.evaluate(scope)
        evaluated.append({"when": move.when, "result": value})  # null stays null in the trace
        results.append(value)
        if small and not (move.short and (value is True or value is False or value is None)):
            small = False
        if value is True or (value is not False and value is not None and truthy(value)):
            chosen = move
            break
    if chosen is None:
        raise NoTransitionMatched(f"no transition from '{state.id}' matched",
                                  hint="; ".join(f"{e['when']} -> {e['result']!r}" for e in evaluated))
    if chosen.apply_set is not None:
        c.context = chosen.apply_set(c.context, scope, ctx.check_size)
    c.error = None  # the state completed: the caught error leaves the scope
    data = {"to": chosen.to, "conditions": evaluated, "line": chosen.line}
    recorder = ctx.recorder if ctx.recorder is not None else RECORDER.get()
    if recorder is not None and recorder.recorded:
        data["recorded"] = list(recorder.recorded)
        recorder.recorded.clear()
        small = False
    small = small and len(evaluated) <= 16
    text = None
    if small:  # the text depends on the results alone (each true, false or null): made once per outcome
        taken = found[1]
        outcome = tuple(results)
        text = taken.get(outcome)
        if text is None:
            text = taken[outcome] = encode_data(data)
    if text is not None and ctx.secrets is None:
        ctx.emit_known("transition_taken", state.id, c.attempt, text, data)
    else:
        ctx.emit("transition_taken", state.id, c.attempt, owned=True if small else (evaluated, data.get("recorded")),
                 text=text, **data)
    ctx.goto(chosen.to)


__all__ = ["advance", "moves", "taken_texts", "Move"]
