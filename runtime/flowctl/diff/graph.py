"""Graphs of a diff: each changed flow drawn over the union of its base and head graphs.

:func:`union_graph` merges the two :class:`~flowctl.graph.flowgraph.FlowGraph` objects of one flow and gives
every node and edge a status — ``added``, ``removed``, ``changed``, ``affected`` (the state is the
same but a contract or policy it depends on changed) or ``unchanged`` — and notes (the field
changes, for tooltips). Because both versions are laid out together, the layout does not jump
between them.

:func:`to_svg` draws every flow in scope as a cluster (graphviz; added green, removed red and
dashed, changed amber, affected amber outline, unchanged grey; labels also carry ``+``/``−``/``~``
so colour is never the only signal). :func:`to_mermaid` draws, per flow, only the changed nodes
plus one hop of context, for a PR comment.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from flowctl.diff.core import ProjectDiff
from flowctl.graph.flowgraph import (CHILD_PREFIX, DOT_SHAPES, FLOW_HANDLERS, Edge, Node, build_graph, dot_text,
                    edge_id, mermaid_edge, mermaid_node, safe_id)

STATUSES = ("added", "removed", "changed", "affected", "unchanged")
MARK = {"added": "+ ", "removed": "− ", "changed": "~ ", "affected": "~ ", "unchanged": ""}
#: status -> (line colour, fill colour, font colour)
COLOURS = {
    "added": ("#1a7f37", "#dafbe1", "#116329"),
    "removed": ("#cf222e", "#ffebe9", "#a40e26"),
    "changed": ("#bf8700", "#fff8c5", "#7d4e00"),
    "affected": ("#bf8700", "#ffffff", "#7d4e00"),
    "unchanged": ("#8c959f", "#f6f8fa", "#57606a"),
}


@dataclass
class UnionGraph:
    """``nodes``: {id: (Node, status, [notes])}; ``edges``: [(Edge, status, [notes])]."""

    flow: str
    status: str
    nodes: dict = field(default_factory=dict)
    edges: list = field(default_factory=list)


@dataclass
class Notes:
    """What the diff says about each node and edge, computed once for all flows:
    ``states``: {state id: [lines]}; ``flow_handlers``: {flow: [lines]}; ``edges``: {(flow, edge key):
    [lines]}; ``affected``: {state id: [reasons]} (states using a changed contract or policy)."""

    states: dict = field(default_factory=dict)
    flow_handlers: dict = field(default_factory=dict)
    edges: dict = field(default_factory=dict)
    affected: dict = field(default_factory=dict)


def collect_notes(diff: ProjectDiff) -> Notes:
    notes = Notes()
    users = _tool_users(diff)
    for c in diff.changes:
        lines = [f.text() for f in c.fields] + [f"⚠ {r.message}" for r in c.risks]
        if c.kind == "state":
            notes.states.setdefault(c.id, []).extend([f"{c.op} {c.title}", *lines])
        elif c.kind == "handler" and c.owner[0] == "state":
            notes.states.setdefault(c.owner[1], []).extend([f"{c.op} {c.id}", *lines])
        elif c.kind == "handler":
            notes.flow_handlers.setdefault(c.flow, []).extend([f"{c.op} {c.id}", *lines])
        elif c.kind == "transition":
            n = c.id.rpartition("#")[2] if "#" in c.id else ""
            notes.edges[(c.flow, f"transition:{c.source}->{c.target}" + (f"#{n}" if n else ""))] = lines
        elif c.kind in ("contract", "policy"):
            tools = {c.id.split("@")[0]} if c.kind == "contract" else set()
            if c.kind == "policy":
                for p in (diff.base.policies.get(c.id), diff.head.policies.get(c.id)):
                    tools.update(p.applies_to if p else ())
            for sid in sorted({s for t in tools for s in users.get(t, ())}):
                notes.affected.setdefault(sid, []).append(f"{c.op} {c.title}" + (f": {lines[0]}" if lines else ""))
    return notes


def _tool_users(diff: ProjectDiff) -> dict:
    """{tool id: {state ids calling it (tool, notify or fallback) in base or head}}."""
    from flowctl.definition import versions

    out: dict = {}
    for project in (diff.base, diff.head):
        for s in project.states.values():
            for ref in [s.tool, s.raw.get("notify")] + [h.fallback for h in s.on_error]:
                if isinstance(ref, str):
                    out.setdefault(versions.split_ref(ref)[0], set()).add(s.id)
    return out


def union_graph(diff: ProjectDiff, flow: str, notes: Notes | None = None) -> UnionGraph:
    """The union of ``flow``'s graph in base and head, with statuses (see the module docstring)."""
    notes = notes or collect_notes(diff)
    before = build_graph(diff.base, flow) if flow in diff.base.flows else None
    after = build_graph(diff.head, flow) if flow in diff.head.flows else None
    flow_status = "added" if before is None else "removed" if after is None else "changed"
    state_notes = {**notes.states, FLOW_HANDLERS: notes.flow_handlers.get(flow, [])}
    edge_notes = {key: lines for (f, key), lines in notes.edges.items() if f == flow}
    affected = notes.affected
    changed_children = {c.id for c in diff.changes if c.kind == "flow"} | {c.flow for c in diff.changes if c.flow}
    union = UnionGraph(flow, flow_status)
    b_nodes = before.nodes if before else {}
    a_nodes = after.nodes if after else {}
    for nid in sorted(set(b_nodes) | set(a_nodes), key=lambda n: (n != "/start", n)):
        node = a_nodes.get(nid) or b_nodes[nid]
        lines = list(state_notes.get(nid, ()))
        if nid not in b_nodes:
            status = "added"
        elif nid not in a_nodes:
            status = "removed"
        elif lines or (nid.startswith(CHILD_PREFIX) and nid[len(CHILD_PREFIX):] in changed_children):
            status = "changed"
        elif nid in affected:
            status, lines = "affected", affected[nid]
        else:
            status = "unchanged"
        union.nodes[nid] = (node, status, lines)
    b_edges = {e.key: e for e in (before.edges if before else ())}
    a_edges = {e.key: e for e in (after.edges if after else ())}
    for key in list(b_edges) + [k for k in a_edges if k not in b_edges]:
        b, a = b_edges.get(key), a_edges.get(key)
        if b is None:
            status = "added"
        elif a is None:
            status = "removed"
        elif key in edge_notes or (b.kind != "transition" and (b.label, b.title) != (a.label, a.title)):
            status = "changed"  # a transition's label may change with its siblings; trust the diff
        else:
            status = "unchanged"
        union.edges.append((a or b, status, edge_notes.get(key, [])))
    return union


def union_graphs(diff: ProjectDiff) -> list[UnionGraph]:
    """One :class:`UnionGraph` per flow in scope (:meth:`ProjectDiff.flows_in_scope`)."""
    notes = collect_notes(diff)
    return [union_graph(diff, f, notes) for f in diff.flows_in_scope()]


# ----------------------------------------------------------------------------- SVG
def digraph(diff: ProjectDiff):
    """A ``graphviz.Digraph`` with one cluster per flow in scope (imports graphviz)."""
    from graphviz import Digraph, nohtml

    g = Digraph(name="flowctl_diff", graph_attr={"rankdir": "TB", "fontname": "Helvetica", "compound": "true",
                                                  "label": dot_text(f"flowctl diff {diff.base_label} → {diff.head_label}"),
                                                  "labelloc": "t", "id": "flowctl_diff"},
                node_attr={"fontname": "Helvetica", "fontsize": "11"}, edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    for union in union_graphs(diff):
        prefix = safe_id(CHILD_PREFIX + union.flow) + "-"
        with g.subgraph(name="cluster_" + prefix.rstrip("-")) as c:
            whole = union.status in ("added", "removed")  # a changed flow's cluster stays neutral
            line, _fill, font = COLOURS[union.status if whole else "unchanged"]
            c.attr(label=dot_text(f"{MARK[union.status] if whole else ''}flow {union.flow}"), color=line, fontcolor=font,
                   style="dashed" if union.status == "removed" else "solid", id=prefix + "cluster")
            for nid, (node, status, notes) in union.nodes.items():
                c.node(prefix + nid, nohtml(dot_text(MARK[status] + node.label) if node.type != "start" else ""),
                       **_node_style(node, status, notes, prefix))
            for edge, status, notes in union.edges:
                attrs = _edge_style(edge, status, notes, prefix)
                label = attrs.pop("label", None)
                c.edge(prefix + edge.source, prefix + edge.target, nohtml(label) if label else None, **attrs)
    return g


def _node_style(node: Node, status: str, notes: list, prefix: str) -> dict:
    line, fill, font = COLOURS[status]
    attrs = dict(DOT_SHAPES.get(node.type, DOT_SHAPES["task"]))
    styles = [s for s in attrs.get("style", "").split(",") if s and s != "dashed"] + ["filled"]
    if status == "removed":
        styles.append("dashed")
    attrs.update(style=",".join(dict.fromkeys(styles)), color=line, fillcolor=fill, fontcolor=font,
                 penwidth="2" if status != "unchanged" else "1", id=prefix + safe_id(node.id),
                 tooltip=dot_text("\n".join([f"{status}: {node.id}", *notes]) if notes else f"{status}: {node.tooltip or node.id}"))
    attrs["class"] = status
    if node.type == "start":
        attrs["fillcolor"] = line
    return attrs


def _edge_style(edge: Edge, status: str, notes: list, prefix: str) -> dict:
    line, _fill, font = COLOURS[status]
    dashed = status == "removed" or edge.dashed
    attrs = {"id": edge_id(edge, prefix), "color": line, "fontcolor": font, "class": status,
             "penwidth": "2" if status != "unchanged" else "1", "style": "dashed" if dashed else "solid",
             "tooltip": dot_text("\n".join([f"{status}: {edge.title or edge.key}", *notes]))}
    if edge.kind == "child":
        attrs["style"] = "dotted"
    label = MARK[status] + edge.label
    if label.strip():
        attrs["label"] = dot_text(label)
        attrs["labeltooltip"] = attrs["tooltip"]
    return attrs


def to_dot(diff: ProjectDiff) -> str:
    return digraph(diff).source


def to_svg(diff: ProjectDiff) -> str:
    """SVG text of :func:`digraph`. Raises :class:`~flowctl.errors.UsageError` without the ``dot`` program."""
    from flowctl.graph.flowgraph import pipe

    return pipe(digraph(diff), "svg").decode("utf-8")


# ----------------------------------------------------------------------------- mermaid
_MERMAID_CLASS = {
    "added": "fill:#dafbe1,stroke:#1a7f37,stroke-width:2px,color:#116329",
    "removed": "fill:#ffebe9,stroke:#cf222e,stroke-width:2px,stroke-dasharray:5 3,color:#a40e26",
    "changed": "fill:#fff8c5,stroke:#bf8700,stroke-width:2px,color:#7d4e00",
    "affected": "fill:#ffffff,stroke:#bf8700,stroke-width:2px,color:#7d4e00",
    "unchanged": "fill:#f6f8fa,stroke:#8c959f,color:#57606a",
}
_MERMAID_LINK = {
    "added": "stroke:#1a7f37,stroke-width:2px",
    "removed": "stroke:#cf222e,stroke-width:2px,stroke-dasharray:5 3",
    "changed": "stroke:#bf8700,stroke-width:2px",
}


@dataclass
class MermaidChart:
    flow: str
    text: str
    edges: int


def focus(union: UnionGraph) -> tuple[list, list]:
    """(node ids, edges) to show: every node or edge that is not unchanged, the ends of changed
    edges, and one hop of unchanged context around them."""
    core = {nid for nid, (_n, status, _) in union.nodes.items() if status != "unchanged"}
    for edge, status, _ in union.edges:
        if status != "unchanged":
            core.update((edge.source, edge.target))
    shown = set(core)
    for edge, _s, _ in union.edges:
        if edge.source in core or edge.target in core:
            shown.update((edge.source, edge.target))
    edges = [(e, s, n) for e, s, n in union.edges if (e.source in core or e.target in core)]
    return [n for n in union.nodes if n in shown], edges


def mermaid_chart(union: UnionGraph) -> MermaidChart:
    """A ``flowchart TD`` of :func:`focus`: labels marked ``+``/``−``/``~``, classes per status,
    ``linkStyle`` per changed edge, removed edges dotted."""
    node_ids, edges = focus(union)
    lines = ["flowchart TD", f"  %% flow {union.flow}: changed states and one hop of context (flowctl diff)"]
    classes: dict = {}
    for nid in node_ids:
        node, status, _ = union.nodes[nid]
        lines.append("  " + mermaid_node(node, mark=MARK[status] if node.type != "start" else ""))
        classes.setdefault(status, []).append(safe_id(nid))
    styles = []
    for i, (edge, status, _) in enumerate(edges):
        arrow = "-.->" if (status == "removed" or edge.dashed or edge.kind == "child") else "-->"
        lines.append("  " + mermaid_edge(edge, mark=MARK[status], arrow=arrow))
        if status in _MERMAID_LINK:
            styles.append(f"  linkStyle {i} {_MERMAID_LINK[status]}")
    for status in STATUSES:
        if status in classes:
            lines.append(f"  classDef {status} {_MERMAID_CLASS[status]}")
            lines.append(f"  class {','.join(classes[status])} {status}")
    lines += styles
    return MermaidChart(union.flow, "\n".join(lines) + "\n", len(edges))


def mermaid_charts(diff: ProjectDiff) -> list[MermaidChart]:
    """One chart per flow in scope that has something to show."""
    charts = []
    for union in union_graphs(diff):
        chart = mermaid_chart(union)
        if chart.edges or len(chart.text.splitlines()) > 2:
            charts.append(chart)
    return charts
