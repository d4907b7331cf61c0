"""A run's page: ``GET /console/runs/{run_id}`` [runs:read].

What it shows, all read through the library (the store's readers, the engine's pinned definition,
:mod:`flowctl.graph`), nothing sensitive (:mod:`flowctl.server.views` redacts input, params, output,
context and every event's data with the run's own :class:`~flowctl.engine.sensitive.Secrets`):

* the flow's graph as Graphviz SVG with the path taken (blue), the current state (thick), failed
  states (red) and compensated ones (orange); a note instead when ``dot`` is not installed;
* the timeline: each event as a kind — ``step``, ``model`` (``model_*``/``llm_*`` events, when a
  flow has them), ``gate``, ``effect`` (tool calls), ``verify``, ``compensation``, ``residue``,
  ``review``, ``takeover`` (cancel, redrive, context edits) and ``run`` — the last :data:`SHOWN`
  of them (a longer run says how many came before);
* input, params, output and context; the child runs as a tree (:data:`CHILD_DEPTH` levels);
* ``flowctl audit verify``'s checks on this run (:class:`flowctl.store.prune.RunAudit`: hash
  chain, run row against its log, step records, the row's seal and the definition snapshot; a
  pruned run's ranges against their archives in the project's ``.flowctl/archive/``), fed one
  event at a time in the same pass that builds the timeline (archived events put back in it);
* the takeover actions the viewer's scopes allow (:mod:`flowctl.server.console.actions`).
"""
from __future__ import annotations

from collections import deque

from flowctl.server import views
from flowctl.server.console.auth import page
from flowctl.server.console.web import message, render
from flowctl.store.archive import default_folder
from flowctl.store.events import iter_events
from flowctl.store.prune import RunAudit
from flowctl.store.records import FINAL

SHOWN = 500
CHILD_DEPTH = 3
KINDS = {
    "state_entered": "step", "transition_taken": "step", "policy_decided": "gate", "tool_invoked": "effect",
    "tool_succeeded": "effect", "tool_failed": "effect", "retry_scheduled": "effect", "fallback_used": "effect",
    "step_recovered": "effect", "effect_snapshot": "effect", "verify_passed": "verify", "verify_failed": "verify",
    "compensation_started": "compensation", "compensation_succeeded": "compensation",
    "compensation_retry": "compensation", "compensation_failed": "residue", "run_cancelled": "takeover",
    "run_redriven": "takeover", "context_overridden": "takeover", "error_caught": "error", "handler_failed": "error",
}


def kind_of(event_type: str) -> str:
    if event_type.startswith(("model_", "llm_")):
        return "model"
    if event_type.startswith("review_") or event_type == "run_paused":
        return "review"
    return KINDS.get(event_type, "run")


def summary_of(ev: dict) -> str:
    """One line saying what the (redacted) event holds."""
    d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    t = ev["type"]
    bits = []
    for key in ("tool", "outcome", "policy", "rule", "decision", "by", "reason", "to", "error", "message",
                "compensate", "duration_ms"):
        v = d.get(key)
        if v in (None, "", {}):
            continue
        if key == "error" and isinstance(v, dict):
            v = f"{v.get('type')}: {v.get('message')}"
        bits.append(f"{key}={v}")
    if t == "context_overridden":
        bits.append(f"before={d.get('before')} after={d.get('after')}")
    return " · ".join(str(b) for b in bits)[:400]


def snapshot_problem(store, row) -> str | None:
    """Why the run's definition snapshot is not the one it is pinned to, or None (as ``audit verify``)."""
    from flowctl.definition.model import files_digest

    try:
        if files_digest(store.load_definition(row["digest"])) != row["digest"]:
            return f"the definition snapshot {row['digest'][:12]} does not hash to its digest (edited in the store)"
    except Exception as exc:  # noqa: BLE001 - a missing or unreadable snapshot is what is reported
        return f"the definition snapshot {row['digest'][:12]} cannot be read ({exc})"
    return None


def read(service, row) -> dict:
    """The timeline, marks and audit result of ``row``, from one pass over its events."""
    store = service.store
    s = views.secrets_of(service.project, row)
    audit = RunAudit(store, row, store.steps(row["id"]), folder=default_folder(service.project.root))
    shown: deque = deque(maxlen=SHOWN)
    total = 0
    path, failed, compensated = [], set(), set()
    for ev in audit.events(iter_events(store, row["id"])):
        total += 1
        t, state = ev["type"], ev.get("state")
        if t == "state_entered" and state:
            path.append(state)
        elif t in ("tool_failed", "error_caught", "verify_failed") and state:
            failed.add(state)
        elif t == "compensation_succeeded" and state:
            compensated.add(state)
        item = views.event(s, ev)
        item["kind"] = kind_of(t)
        item["summary"] = summary_of(item)
        shown.append(item)
    result = audit.finish([snapshot_problem(store, row)])
    return {"events": list(shown), "total": total, "path": path, "failed": failed, "compensated": compensated,
            "audit": {"ok": not result.problems, "problems": result.problems, "events": result.events,
                      "notes": result.notes}}


def graph_svg(service, row, marks: dict) -> tuple:
    """``(svg text or None, note)``: the flow's graph with the run's marks (see the module)."""
    from flowctl.errors import FlowctlError
    from flowctl.graph.flowgraph import build_graph, edge_attrs, node_attrs, pipe

    try:
        project = service.engine.project_for(row["digest"])
    except FlowctlError:
        project = service.project
    try:
        graph = build_graph(project, row["flow"])
        from graphviz import Digraph, nohtml

        g = Digraph(name=row["flow"], graph_attr={"rankdir": "TB", "fontname": "Helvetica", "bgcolor": "transparent"},
                    node_attr={"fontname": "Helvetica", "fontsize": "11"},
                    edge_attr={"fontname": "Helvetica", "fontsize": "9"})
        visited = set(marks["path"])
        current = (row.get("cursor") or {}).get("state") if isinstance(row.get("cursor"), dict) else None
        for node in graph.nodes.values():
            attrs = node_attrs(node)
            label = attrs.pop("label")
            classes = []
            if node.id in visited:
                attrs.update(color="#0969da", penwidth="2")
                classes.append("visited")
            if node.id in marks["compensated"]:
                attrs.update(color="#bc4c00", penwidth="2.5", fillcolor="#fff1e5")
                classes.append("compensated")
            if node.id in marks["failed"]:
                attrs.update(color="#cf222e", penwidth="2.5", fillcolor="#ffebe9")
                classes.append("failed")
            if node.id == current:
                attrs.update(penwidth="4")
                classes.append("current")
            if classes:
                attrs["class"] = " ".join(classes)
            g.node(node.id, nohtml(label), **attrs)
        taken = set(zip(marks["path"], marks["path"][1:]))
        for edge in graph.edges:
            attrs = edge_attrs(edge)
            label = attrs.pop("label", None)
            if (edge.source, edge.target) in taken:
                attrs.update(color="#0969da", penwidth="2")
            g.edge(edge.source, edge.target, nohtml(label) if label else None, **attrs)
        svg = pipe(g, "svg").decode("utf-8")
    except (FlowctlError, ImportError) as exc:
        return None, str(exc)
    start = svg.find("<svg")
    return (svg[start:] if start >= 0 else svg), ""


def children_of(store, project, run_id: str, depth: int = 1) -> list:
    """``[{run, children}]``: the child runs of ``run_id`` as a tree, :data:`CHILD_DEPTH` levels."""
    out = []
    for child in store.list_runs(parent_id=run_id, limit=200):
        out.append({"run": views.summary(project, child),
                    "children": children_of(store, project, child["id"], depth + 1) if depth < CHILD_DEPTH else []})
    return out


def routes(router, service) -> None:
    from flowctl.engine.pause import is_paused_by_operator

    @router.get("/runs/{run_id}")
    @page("runs:read")
    def run_page(request, viewer):
        """A run's page."""
        from flowctl.errors import RunNotFound, UsageError

        try:
            row = service.store.get_run(request.path_params["run_id"])
        except (RunNotFound, UsageError) as exc:
            return message(request, 404, "No such run", str(exc))
        s = views.secrets_of(service.project, row)
        detail = views.detail(service.project, row)
        if request.query_params.get("part") == "status":
            return render(request, "_run_status.html", run=detail)
        cursor = row.get("cursor") if isinstance(row.get("cursor"), dict) else {}
        context = s.scrub(cursor.get("context"))
        marks = read(service, row)
        svg, note = graph_svg(service, row, marks)
        return render(request, "run.html", run=detail, context=context, marks=marks, svg=svg, graph_note=note,
                      children=children_of(service.store, service.project, row["id"]),
                      residue=s.scrub(cursor.get("residue") or []), final=row["status"] in FINAL,
                      paused=s.scrub(cursor.get("pending")) if is_paused_by_operator(row) else None,
                      pause_requested=s.scrub(row.get("pause_requested")))


__all__ = ["children_of", "graph_svg", "kind_of", "read", "routes"]
