"""A flow's graph of states, and the checks that read it (run from :data:`flowctl.check.checks.CHECKS`).

:func:`flow_graph` is the adjacency every graph reader shares (validate, the engine's start-up
check, coverage, reviews): business transitions, a state's own ``on_error`` gotos and review
``on_timeout`` gotos, and the flow's ``on_error`` gotos (from every non-terminal state).
Reachability uses all of them; the trap check ("can this state still reach an end?") leaves out
the flow-level handlers, since a catch-all there would otherwise hide every loop.
:func:`child_flows` and :func:`check_children` read the call graph between flows
(``parallel``/``map``/``subflow``).
"""
from __future__ import annotations

from collections import deque

from flowctl.definition.model import Project


def flow_graph(project: Project, flow):
    """Adjacency of ``flow``: ``{state: [(target, kind, doc, path)]}`` with kind one of
    ``transition``, ``error`` (state on_error), ``timeout`` (review), ``flow_error`` (flow on_error)."""
    edges: dict = {}
    order = []
    seen = set()
    queue = deque([flow.start])
    named = {n for n, _ in flow.named_states()}
    queue.extend(sorted(named))
    while queue:
        sid = queue.popleft()
        if sid in seen:
            continue
        seen.add(sid)
        order.append(sid)
        out = edges.setdefault(sid, [])
        state = project.states.get(sid)
        for t in flow.transitions_from(sid):
            out.append((t.to, "transition", flow.doc, t.path + ("to",)))
        if state is None:
            continue
        for h in state.on_error:
            if h.goto:
                out.append((h.goto, "error", state.doc, h.path + ("goto",)))
        goto = (state.raw.get("on_timeout") or {}).get("goto")
        if goto:
            out.append((goto, "timeout", state.doc, ("on_timeout", "goto")))
        if not state.terminal:
            for h in flow.on_error:
                if h.goto:
                    out.append((h.goto, "flow_error", flow.doc, h.path + ("goto",)))
        queue.extend(target for target, *_ in out)
    return edges


def _reach(edges, start, kinds=None, reverse=False):
    adj: dict = {}
    for src, outs in edges.items():
        for dst, kind, *_ in outs:
            if kinds is None or kind in kinds:
                a, b = (dst, src) if reverse else (src, dst)
                adj.setdefault(a, []).append(b)
    seen = set(start)
    queue = deque(start)
    while queue:  # breadth-first
        for nxt in adj.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def check_graph(project: Project):
    """FC201 unreachable, FC202 no terminal, FC203 trap, FC204 terminal with exits, FC205 no exit, FC206 no default."""
    for flow in project.flows.values():
        if flow.start not in project.states:
            continue  # reported by check_references
        edges = flow_graph(project, flow)
        reachable = _reach(edges, [flow.start])
        first_named: dict = {}
        for name, path in flow.named_states():
            first_named.setdefault(name, path)
        for name, path in first_named.items():
            if name not in reachable and name in project.states:
                yield flow.doc.diag("FC201", f"state '{name}' is unreachable from start '{flow.start}' in flow '{flow.id}'",
                                    path, hint="add a transition into it, or remove its transitions")
        known = [s for s in edges if s in project.states and s in reachable]
        terminals = [s for s in known if project.states[s].terminal]
        if not terminals:
            # An exit into a missing or broken state is reported on its own; do not guess past it.
            if not any(_undefined_exit(project, edges, s) for s in known):
                yield flow.doc.diag("FC202", f"flow '{flow.id}' can never end: no succeed or fail state is reachable",
                                    ("start",), hint="add a transition to a succeed or fail state")
        else:
            # A state whose exit leads into a missing or broken state may end there: its own error
            # says so, and states before it are not traps because of a file that did not load.
            seeds = terminals + [s for s in known if _undefined_exit(project, edges, s)]
            ends = _reach(edges, seeds, {"transition", "error", "timeout"}, reverse=True)
            for sid in known:
                if sid not in ends and not _undefined_exit(project, edges, sid):
                    yield flow.doc.diag("FC203", f"state '{sid}' cannot reach a succeed or fail state in flow '{flow.id}' (a trap)",
                                        first_named.get(sid, ("start",)),
                                        hint="give the loop a way out, e.g. a transition guarded by visits.<state>")
        for sid in known:
            state = project.states[sid]
            outs = flow.transitions_from(sid)
            if state.terminal and outs:
                yield flow.doc.diag("FC204", f"'{sid}' is a {state.type} state and cannot have transitions", outs[0].path + ("from",),
                                    hint="terminal states end the run; remove the transition")
            elif not state.terminal and not outs:
                yield flow.doc.diag("FC205", f"state '{sid}' has no transition out in flow '{flow.id}'",
                                    first_named.get(sid, ("start",)), hint=f"add a transition from: {sid}")
            elif outs and all(t.when is not None for t in outs):
                yield flow.doc.diag("FC206", f"every transition from '{sid}' has a condition; when none holds the run fails with NoTransitionMatched",
                                    outs[-1].path, hint="add a last transition without `when` as the default")


def _undefined_exit(project, edges, sid):
    return any(t not in project.states for t, *_ in edges.get(sid, ()))


def child_flows(state) -> list[str]:
    """Ids of the flows a parallel (its branches, in the order written), map or subflow state
    starts; ``[]`` for any other state and for ``None`` (a state that does not load)."""
    if state is None:
        return []
    if state.type == "parallel":
        return [b for b in state.get("branches") or () if isinstance(b, str)]
    if state.type in ("map", "subflow") and isinstance(state.get("flow"), str):
        return [state.get("flow")]
    return []


def check_children(project: Project):
    """FC107 a flow that calls itself (directly or through others) with no depth limit;
    FC108 a sub-flow input that cannot satisfy the child flow's required input fields."""
    calls: dict = {}
    for flow in project.flows.values():
        for sid in flow_graph(project, flow):
            state = project.states.get(sid)
            if state is None:
                continue
            for child in child_flows(state):
                calls.setdefault(flow.id, []).append((child, state))
    for flow_id in calls:
        seen, stack = set(), [flow_id]
        while stack:  # depth-first over the call graph: does flow_id reach itself?
            for child, state in calls.get(stack.pop(), ()):
                if child == flow_id:
                    limited = state.get("max_depth") or project.flows[flow_id].limits.max_depth
                    if not limited:
                        yield state.doc.diag("FC107", f"flow '{flow_id}' calls itself through '{state.id}' with no depth limit",
                                             ("type",), hint="set max_depth on the state (or limits.max_depth on the flow)")
                elif child not in seen:
                    seen.add(child)
                    stack.append(child)
    for state in project.states.values():
        mapping = state.get("item_input") if state.type == "map" else state.input
        if not isinstance(mapping, dict) or state.get("batch"):
            continue
        for child in child_flows(state):
            schema = project.flows[child].input_schema if child in project.flows else None
            required = (schema or {}).get("required") if isinstance(schema, dict) else None
            for name in required if isinstance(required, list) else ():
                if isinstance(name, str) and name not in mapping:
                    key = "item_input" if state.type == "map" else "input"
                    yield state.doc.diag("FC108", f"child flow '{child}' requires input '{name}', which {key} never sets",
                                         (key,), key=True, hint=f"add {name}: <expression> to {key}")


