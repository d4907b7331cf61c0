"""Coverage of a flow by its golden cases, and input skeletons for what no case reaches.

Three figures per flow, each "exercised by at least one case / all":

* **transitions** — the flow's ``transitions`` entries (each ``from``/``when``/``to`` rule);
* **handlers** — every ``on_error`` rule of the flow's states, every rule of the flow's own
  ``on_error``, and every review's ``on_timeout``;
* **error edges** — the graph's error arrows as :func:`flowctl.check.topology.flow_graph` draws them: a
  state handler's ``goto``, a review's ``on_timeout`` ``goto``, and a flow handler's ``goto`` *from
  each state* it can leave. A flow handler is one handler but many edges, so this figure is
  reported, not gated.

``--min-coverage N`` gates transitions and handlers. What a case exercised is read from its run's
audit events: ``transition_taken`` (the number of conditions evaluated names the rule taken),
``error_caught`` (layer and handler index) and ``review_timed_out``.

:func:`suggest` lists every uncovered transition, handler and error edge with the shortest route
to it from the flow's start and a case skeleton (input, mocks along the route, review decisions,
expected path) that would reach it — built from an existing case that shares the route when there
is one (so its values are realistic), else from the JSON Schemas, and bent by the ``when``
conditions on the way (``response.status == 'success'`` sets ``status`` in that tool's mock).

The pieces: the items and figures (:mod:`flowctl.testing.coverage_items`), measuring them from
audit events (this module), and the suggestions (:mod:`flowctl.testing.suggest`); every public
name stays importable from here.
"""
from __future__ import annotations

from flowctl.store.audit import REDACTED
from flowctl.testing.coverage_items import EDGES, GATED, HANDLERS, TRANSITIONS, FlowCoverage, Item
from flowctl.testing.suggest import Suggestion, facts, sample, suggest


# ------------------------------------------------------------------------------------ the items
def _handler_label(h) -> str:
    errors = ", ".join(h.errors)
    if h.goto:
        action = f"goto {h.goto}"
    elif h.fallback:
        action = f"fallback {h.fallback}"
    elif h.fail:
        action = f"fail {h.fail}"
    else:
        action = "fail"
    return f"[{errors}] → {action}"


def items_of(project, flow) -> dict:
    from flowctl.check.topology import flow_graph

    graph = flow_graph(project, flow)
    transitions = []
    for t in flow.transitions:
        cond = f"when {t.when}" if t.when is not None else "(default)"
        transitions.append(Item(TRANSITIONS, ("t", t.index), f"{t.source} → {t.to} {cond}", t.where(), t.source, t.to))
    handlers = []
    edges = []
    for sid in graph:
        state = project.states.get(sid)
        if state is None:
            continue
        for i, h in enumerate(state.on_error):
            handlers.append(Item(HANDLERS, ("state", sid, i), f"{sid} on_error[{i}] {_handler_label(h)}", h.where(),
                                 sid, h.goto))
        on_timeout = state.raw.get("on_timeout") if state.type == "review" else None
        if isinstance(on_timeout, dict):
            action = f"goto {on_timeout['goto']}" if "goto" in on_timeout else f"fail {on_timeout.get('fail')}"
            handlers.append(Item(HANDLERS, ("timeout", sid), f"{sid} on_timeout → {action}", state.where("on_timeout"),
                                 sid, on_timeout.get("goto")))
    for i, h in enumerate(flow.on_error):
        handlers.append(Item(HANDLERS, ("flow", i), f"flow on_error[{i}] {_handler_label(h)}", h.where(), "*", h.goto))
    for sid, outs in graph.items():
        for dst, kind, doc, path in outs:
            if kind == "transition":
                continue
            line, col = doc.at(tuple(path))
            name = {"error": "on_error", "timeout": "on_timeout", "flow_error": "flow on_error"}[kind]
            edges.append(Item(EDGES, (sid, kind, tuple(path)), f"{sid} → {dst} ({name})", f"{doc.file}:{line}:{col}",
                              sid, dst))
    return {TRANSITIONS: transitions, HANDLERS: handlers, EDGES: edges}


def exercised(project, flow, events) -> set:
    """Keys of the items (see :func:`items_of`) that one run's ``events`` exercised."""
    keys = set()
    for ev in events:
        t, d, sid = ev["type"], ev.get("data") or {}, ev.get("state")
        if t == "transition_taken":
            rules = flow.transitions_from(sid)
            n = len(d.get("conditions") or ())
            to = d.get("to")
            if 1 <= n <= len(rules) and (rules[n - 1].to == to or to == REDACTED):
                keys.add(("t", rules[n - 1].index))
            else:  # a definition this flow is not (the run's snapshot): match by target
                for r in rules:
                    if r.to == d.get("to"):
                        keys.add(("t", r.index))
                        break
        elif t == "error_caught":
            layer, index = d.get("layer"), d.get("handler")
            if index is None:
                continue
            state = project.states.get(sid)
            if layer == "state" and state is not None and index < len(state.on_error):
                keys.add(("state", sid, index))
                h = state.on_error[index]
                if h.goto:
                    keys.add((sid, "error", tuple(h.path) + ("goto",)))
            elif layer == "flow" and index < len(flow.on_error):
                keys.add(("flow", index))
                h = flow.on_error[index]
                if h.goto:
                    keys.add((sid, "flow_error", tuple(h.path) + ("goto",)))
        elif t == "review_timed_out":
            keys.add(("timeout", sid))
            keys.add((sid, "timeout", ("on_timeout", "goto")))
    return keys


def compute(project, flows, results) -> dict:
    """``{flow id: FlowCoverage}`` from case results (:class:`~flowctl.testing.runner.CaseResult`).

    A case covers its own flow and, through the child runs it started (parallel, map, subflow
    states), those runs' flows too; ``cases`` counts the cases written for the flow itself."""
    out = {}
    for flow_id in flows:
        if flow_id in project.flows:
            out[flow_id] = FlowCoverage(flow_id, items_of(project, project.flows[flow_id]))
    for r in results:
        if r.case.flow in out:
            out[r.case.flow].cases += 1
        runs: dict = {}
        flow_of: dict = {}
        for ev in r.events:
            runs.setdefault(ev.get("run_id"), []).append(ev)
            if ev["type"] == "run_started":
                flow_of[ev.get("run_id")] = (ev.get("data") or {}).get("flow")
        for run_id, events in runs.items():
            cov = out.get(flow_of.get(run_id) or r.case.flow)
            if cov is None:
                continue
            keys = exercised(project, project.flows[cov.flow], events)
            for items in cov.items.values():
                for item in items:
                    if item.key in keys and r.case.name not in item.covered_by:
                        item.covered_by.append(r.case.name)
    return out


def table(coverages) -> str:
    """The coverage figures, one line per flow."""
    rows = [("flow", "cases", TRANSITIONS, HANDLERS, EDGES)]
    for cov in coverages.values():
        cells = [f"{d}/{t} {p:.0f}%" for d, t, p in (cov.figure(k) for k in (TRANSITIONS, HANDLERS, EDGES))]
        rows.append((cov.flow, str(cov.cases), *cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


__all__ = ["Item", "FlowCoverage", "Suggestion", "items_of", "exercised", "compute", "table", "suggest", "facts",
           "sample", "TRANSITIONS", "HANDLERS", "EDGES", "GATED"]
