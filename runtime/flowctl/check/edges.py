"""The edges the data-flow analysis (:mod:`flowctl.check.dataflow`) follows out of a state, and
which errors a state can raise (an error edge is followed only where a matching error can happen:
a ``PolicyDenied`` handler is not an edge out of a ``choice``).

Edges: ``(target, [set mappings on the way], when)``. Transitions are indexed once per flow in
:data:`MOVES`, which the analysis empties when it is done, so it keeps no project alive.
"""
from __future__ import annotations

_TOOL_CALLERS = ("task",)
CHILD_TYPES = ("parallel", "map", "subflow")
MODEL_TYPES = ("llm", "agent")
#: error names only the engine raises, with the state kinds that can raise them
_NEEDS_SIDE_EFFECT = frozenset({"PolicyDenied", "BoundaryViolation"})
_NEEDS_TOOL = frozenset({"ToolTimeout"})
_NEEDS_CHILDREN = frozenset({"BranchFailed"})
_NEEDS_REVIEW = frozenset({"ReviewTimeout"})


def follow_edges(project, flow, state):
    """(target, set mappings on the way, when) of every edge the analysis follows out of ``state``."""
    own = [state.get("set")] if state.type == "pass" else []
    fallback_sets = [h.set for h in state.on_error if h.fallback]
    for t in moves_from(flow, state.id):
        yield t.to, own + [t.set], t.when
        for s in fallback_sets:  # through the fallback: its handler's set, not the state's own
            yield t.to, [s, t.set], t.when
    caught_all = False
    for h in state.on_error:
        if caught_all:
            break
        caught_all = "*" in h.errors
        if h.goto and may_raise(project, state, h.errors):
            yield h.goto, [h.set], None
    timeout = state.get("on_timeout") if state.type == "review" else None
    if isinstance(timeout, dict) and isinstance(timeout.get("goto"), str) and state.get("timeout") is not None:
        yield timeout["goto"], [], None
    if can_leave(flow, state) and not caught_all:
        for h in flow.on_error:
            if h.goto and may_raise(project, state, h.errors):
                yield h.goto, [h.set], None
            if "*" in h.errors:
                break


MOVES: dict = {}  # id(flow) -> (flow, {state: transitions}), for the flows of the current validate only


def moves_from(flow, sid) -> tuple:
    """``flow.transitions_from(sid)``, indexed once per flow object (:func:`check_dataflow` empties
    the index when it is done, so that it keeps no project alive)."""
    found = MOVES.get(id(flow))
    if found is None or found[0] is not flow:
        index: dict = {}
        for t in flow.transitions:
            index.setdefault(t.source, []).append(t)
        found = MOVES[id(flow)] = (flow, {k: tuple(v) for k, v in index.items()})
    return found[1].get(sid, ())


def can_leave(flow, state) -> bool:
    """Can an error in ``state`` go through the flow's handlers? Every state but an end whose
    expressions cannot fail (a fail state's ``{expr}``, the flow's ``output`` on succeed can)."""
    if not state.terminal:
        return True
    if state.type == "fail":
        return any(isinstance(state.get(k), dict) for k in ("error", "cause"))
    return flow.output is not None and not isinstance(flow.output, (int, float, bool))


def may_raise(project, state, errors) -> bool:
    """Can ``state`` raise an error a handler listing ``errors`` catches? False only when every name
    is one only the engine raises and this kind of state cannot."""
    names = [e for e in errors if isinstance(e, str)] if isinstance(errors, (list, tuple)) else []
    if not names:
        return True
    for name in names:
        if name == "*":
            return True
        if name in _NEEDS_SIDE_EFFECT:
            if calls_side_effect(project, state):
                return True
        elif name in _NEEDS_TOOL:
            if _calls_tool(state):
                return True
        elif name in _NEEDS_CHILDREN:
            if state.type in CHILD_TYPES:
                return True
        elif name in _NEEDS_REVIEW:
            if state.type == "review":
                return True
        else:
            return True
    return False


def _refs(state):
    refs = [state.tool] if state.type in _TOOL_CALLERS else []
    refs += list(state.get("tools") or ()) if state.type == "agent" else []
    refs += [state.get("notify")] if state.type == "review" else []
    refs += [h.fallback for h in state.on_error if h.fallback]
    return [r for r in refs if r]


def _calls_tool(state) -> bool:
    return bool(_refs(state)) or state.type in MODEL_TYPES  # a model call can time out too


def calls_side_effect(project, state) -> bool:
    for ref in _refs(state):
        if not isinstance(ref, str):
            return True
        contract = project.resolve_tool(ref)
        if contract is None or contract.side_effecting:
            return True
    return False
