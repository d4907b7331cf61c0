"""A flow's graph of states, and its renderings: DOT, SVG/PNG (through Graphviz) and mermaid.

:func:`build_graph` turns one flow of a loaded :class:`~flowctl.definition.model.Project` into a
:class:`FlowGraph`; :func:`to_dot`, :func:`to_mermaid` and :func:`render` draw it::

    graph = build_graph(project, "order_return")
    graph.nodes   # {node id: Node}, sorted by id; a state's node id is the state id
    graph.edges   # (Edge, ...) — start edge, transitions in file order, then handler edges

Node ids are stable: a state's id, or one of the pseudo ids below (they contain ``/``, which a
state id never does), so text output diffs cleanly when a flow changes. Edge keys are
``"<kind>:<source>-><target>"`` (``"#2"``, ``"#3"`` … appended for repeats of the same kind and
pair), the same keys :mod:`flowctl.diff.core` uses to match edges across two versions.

Edge kinds: ``start``, ``transition`` (a business transition), ``error`` (a state's own
``on_error`` goto), ``timeout`` (a review's ``on_timeout`` goto), ``flow_error`` (a flow-level
``on_error`` goto, drawn once from the :data:`FLOW_HANDLERS` node rather than from every state)
and ``child`` (a parallel/map/subflow state to the collapsed child flow it runs).

Graphviz (the Python package, and the ``dot`` program for SVG/PNG) is imported only by the
functions that draw; building a graph and mermaid text need neither.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from flowctl.errors import ProjectError, UsageError
from flowctl.check.topology import child_flows
from flowctl.definition.model import Flow, Project, State

START = "/start"
FLOW_HANDLERS = "/on_error"
CHILD_PREFIX = "flow/"
DASHED_KINDS = frozenset({"error", "timeout", "flow_error"})
LABEL_WIDTH = 32

#: Graphviz node attributes per state type (pseudo types: unknown, flow_handlers, child_flow, start).
DOT_SHAPES: Mapping[str, dict] = {
    "task": {"shape": "box", "style": "rounded,filled", "fillcolor": "#ddf4ff"},
    "choice": {"shape": "diamond", "style": "filled", "fillcolor": "#fff8c5"},
    "pass": {"shape": "box", "style": "filled", "fillcolor": "#f6f8fa"},
    "review": {"shape": "hexagon", "style": "filled", "fillcolor": "#fbefff"},
    "wait": {"shape": "ellipse", "style": "filled", "fillcolor": "#f6f8fa"},
    "parallel": {"shape": "parallelogram", "style": "filled", "fillcolor": "#ddf4ff"},
    "map": {"shape": "box3d", "style": "filled", "fillcolor": "#ddf4ff"},
    "subflow": {"shape": "component", "style": "filled", "fillcolor": "#ddf4ff"},
    "succeed": {"shape": "doublecircle", "style": "filled", "fillcolor": "#dafbe1"},
    "fail": {"shape": "doubleoctagon", "style": "filled", "fillcolor": "#ffebe9"},
    "unknown": {"shape": "box", "style": "dashed", "color": "#cf222e", "fontcolor": "#cf222e"},
    "flow_handlers": {"shape": "note", "style": "filled", "fillcolor": "#fff1e5"},
    "child_flow": {"shape": "folder", "style": "filled", "fillcolor": "#f6f8fa"},
    "start": {"shape": "point", "width": "0.15"},
}

#: mermaid node brackets per type: (open, close).
MERMAID_SHAPES: Mapping[str, tuple] = {
    "task": ("(", ")"), "choice": ("{", "}"), "pass": ("[", "]"), "review": ("{{", "}}"),
    "wait": ("([", "])"), "parallel": ("[/", "/]"), "map": ("[\\", "\\]"), "subflow": ("[[", "]]"),
    "succeed": ("(((", ")))"), "fail": (">", "]"), "unknown": ("[", "]"),
    "flow_handlers": ("[", "]"), "child_flow": ("[[", "]]"), "start": ("((", "))"),
}


@dataclass(frozen=True)
class Node:
    """One node. ``type`` is a state type or a pseudo type (``unknown``: named but not defined or
    not loading; ``flow_handlers``; ``child_flow``; ``start``). ``lines`` are the label lines under
    the id (tool, ``retry ×3``, ``fallback: tool@^1`` …); ``tooltip`` is the full description."""

    id: str
    type: str
    lines: tuple = ()
    tooltip: str = ""

    @property
    def label(self) -> str:
        if self.type == "start":
            return ""
        name = {"flow_handlers": "any state (flow on_error)"}.get(self.type, self.id)
        if self.type == "child_flow":
            name = "flow " + self.id[len(CHILD_PREFIX):]
        if self.type == "unknown":
            name = "? " + self.id
        return "\n".join((name, *self.lines))


@dataclass(frozen=True)
class Edge:
    """One edge. ``label`` is short (conditions shortened to :data:`LABEL_WIDTH`), ``title`` the
    full text for tooltips; ``condition`` is a transition's ``when`` as written (None: default)."""

    key: str
    kind: str
    source: str
    target: str
    label: str = ""
    title: str = ""
    condition: str | None = None

    @property
    def dashed(self) -> bool:
        return self.kind in DASHED_KINDS


@dataclass(frozen=True)
class FlowGraph:
    flow: str
    start: str
    nodes: Mapping[str, Node] = field(default_factory=dict)
    edges: tuple = ()


# ----------------------------------------------------------------------------- building
def member_states(project: Project, flow: Flow) -> list[str]:
    """Every state id ``flow`` can enter: the ones it names, plus those reached through the
    states' own ``on_error``/``on_timeout`` gotos. Start first, then sorted."""
    seen = {name for name, _ in flow.named_states()}
    frontier = list(seen)
    while frontier:
        state = project.states.get(frontier.pop())
        for target in _state_gotos(state):
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    rest = sorted(seen - {flow.start})
    return [flow.start, *rest]


def _state_gotos(state: State | None) -> list[str]:
    if state is None:
        return []
    out = [h.goto for h in state.on_error if h.goto]
    goto = (state.raw.get("on_timeout") or {}).get("goto")
    return out + ([goto] if goto else [])


def build_graph(project: Project, flow_id: str, *, children: bool = True) -> FlowGraph:
    """The graph of ``flow_id``. ``children``: add a collapsed node per child flow a
    parallel/map/subflow state runs.

    Raises :class:`UsageError` for an unknown flow and :class:`ProjectError` for a flow whose
    file does not load (its diagnostics are what ``flowctl validate`` shows).
    """
    flow = project.flows.get(flow_id)
    if flow is None:
        if ("flow", flow_id) in project.broken:
            raise ProjectError(f"flow '{flow_id}' does not load", hint="run flowctl validate to see why")
        from flowctl.definition.kinds import no_flow

        raise no_flow(flow_id, project.flows)
    nodes: dict[str, Node] = {START: Node(START, "start", tooltip=f"start of {flow.id}")}
    for sid in member_states(project, flow):
        nodes[sid] = state_node(project, sid)
    edges = _EdgeList()
    edges.add("start", START, flow.start, title=f"start: {flow.start}")
    for t in flow.transitions:
        siblings = flow.transitions_from(t.source)
        if t.when is not None:
            label, title = shorten(t.when), t.when
        else:
            label, title = ("otherwise" if len(siblings) > 1 else ""), "default (no condition)"
        if t.set:
            title += "\nset: " + ", ".join(str(k) for k in t.set)
        edges.add("transition", t.source, t.to, label, title, t.when)
    for sid in list(nodes):
        state = project.states.get(sid)
        if state is None:
            continue
        for h in state.on_error:
            if h.goto:
                names = _errors_label(h.errors)
                edges.add("error", sid, h.goto, shorten(names), f"on_error {names} → {h.goto}")
        goto = (state.raw.get("on_timeout") or {}).get("goto")
        if goto:
            edges.add("timeout", sid, goto, "timeout", f"on_timeout → {goto}")
        if children:
            verb = {"parallel": "branch", "map": "each item", "subflow": "runs"}.get(state.type, "runs")
            for child in child_flows(state):
                cid = CHILD_PREFIX + child
                nodes.setdefault(cid, _child_node(project, child))
                edges.add("child", sid, cid, verb, f"{state.type} {sid} runs flow {child} as a child run")
    if flow.on_error:
        nodes[FLOW_HANDLERS] = _flow_handlers_node(flow)
        for h in flow.on_error:
            if h.goto:
                names = _errors_label(h.errors)
                edges.add("flow_error", FLOW_HANDLERS, h.goto, shorten(names), f"flow on_error {names} → {h.goto}")
                nodes.setdefault(h.goto, state_node(project, h.goto))
    ordered = dict(sorted(nodes.items(), key=lambda kv: (kv[0] != START, kv[0])))
    return FlowGraph(flow.id, flow.start, ordered, tuple(edges.items))


class _EdgeList:
    def __init__(self) -> None:
        self.items: list[Edge] = []
        self.counts: dict = {}

    def add(self, kind, source, target, label="", title="", condition=None) -> None:
        n = self.counts[(kind, source, target)] = self.counts.get((kind, source, target), 0) + 1
        key = f"{kind}:{source}->{target}" + (f"#{n}" if n > 1 else "")
        self.items.append(Edge(key, kind, source, target, label, title, condition))


def state_node(project: Project, sid: str) -> Node:
    """The node of state ``sid`` (type ``unknown`` when it is not defined or does not load)."""
    state = project.states.get(sid)
    if state is None:
        why = "does not load (run flowctl validate)" if ("state", sid) in project.broken else "is not defined"
        return Node(sid, "unknown", (), f"state '{sid}' {why}")
    lines: list[str] = []
    tip = [f"{state.type} {sid}"] + ([state.description.strip()] if state.description else [])
    raw = state.raw
    if state.tool:
        lines.append(state.tool)
    if state.type == "review":
        lines.append(" / ".join(str(d) for d in raw.get("decisions") or ()))
    if state.type == "wait":
        lines.append(f"wait {raw['duration']}" if "duration" in raw else f"until {shorten(str(raw.get('until', '')))}")
    if state.type == "map" and raw.get("flow"):
        lines.append(f"each of {shorten(str(raw.get('items', '')), 24)}")
    if state.type == "fail" and raw.get("error") is not None:
        err = raw["error"]
        lines.append("error " + (err if isinstance(err, str) else "{expr}"))
    if state.retry:
        most = max(r.max_attempts for r in state.retry)
        lines.append(f"retry ×{most}")
        tip += [f"retry {_errors_label(r.errors)}: {r.max_attempts} attempts" for r in state.retry]
    for h in state.on_error:
        names = _errors_label(h.errors)
        if h.fallback:
            lines.append(f"fallback: {h.fallback}")
        if h.fail:
            lines.append(f"{shorten(names, 20)} → fail {h.fail}")
        tip.append(f"on_error {names}: " + _handler_action(h))
    return Node(sid, state.type, tuple(lines), "\n".join(tip))


def with_data(graph: FlowGraph, project: Project) -> FlowGraph:
    """``graph`` with each state annotated with what is defined on entry (``--show-data``): a label
    line ``in: a, b, c?`` (context keys; ``?`` = set on some paths only; ``error``/``review``
    when in scope) and the full lists in the tooltip. From :func:`flowctl.dataflow`."""
    import textwrap
    from dataclasses import replace

    from flowctl.check.dataflow import dataflow

    flow = project.flows.get(graph.flow)
    if flow is None or flow.start not in project.states:
        return graph
    data = dataflow(project, flow)
    nodes = dict(graph.nodes)
    for sid, node in graph.nodes.items():
        if sid not in data.entry:
            continue
        defined = data.defined(sid)
        names = [n.removeprefix("context.") for n in defined["always"]] + \
                [n.removeprefix("context.") + "?" for n in defined["sometimes"]]
        lines = textwrap.wrap("in: " + (", ".join(names) if names else "(nothing set)"), LABEL_WIDTH)
        if len(lines) > 4:
            lines = lines[:3] + [f"… {len(names)} in all"]
        tip = [f"defined on entry: {', '.join(defined['always']) or 'nothing'}"]
        if defined["sometimes"]:
            tip.append(f"on some paths only: {', '.join(defined['sometimes'])}")
        nodes[sid] = replace(node, lines=node.lines + tuple(lines),
                             tooltip="\n".join(filter(None, [node.tooltip, *tip])))
    return replace(graph, nodes=nodes)


def _child_node(project: Project, child: str) -> Node:
    flow = project.flows.get(child)
    if flow is None:
        why = "does not load" if ("flow", child) in project.broken else "not defined"
        return Node(CHILD_PREFIX + child, "child_flow", (f"({why})",), f"flow '{child}' {why}")
    count = len(member_states(project, flow))
    size = f"{count} state{'s' * (count != 1)}"
    return Node(CHILD_PREFIX + child, "child_flow", (size,), f"child flow {child}: {size}; draw it with: flowctl graph {child}")


def _flow_handlers_node(flow: Flow) -> Node:
    lines = []
    for h in flow.on_error:
        if not h.goto:
            lines.append(f"{shorten(_errors_label(h.errors), 20)} → {_handler_action(h)}")
    tip = [f"flow on_error {_errors_label(h.errors)}: {_handler_action(h)}" for h in flow.on_error]
    return Node(FLOW_HANDLERS, "flow_handlers", tuple(lines), "\n".join(tip))


def _handler_action(h) -> str:
    parts = []
    if h.compensate:
        parts.append("compensate")
    if h.set:
        parts.append("set " + ", ".join(str(k) for k in h.set))
    if h.fallback:
        parts.append(f"fallback {h.fallback}")
    if h.goto:
        parts.append(f"goto {h.goto}")
    if h.fail:
        parts.append(f"fail {h.fail}")
    return ", ".join(parts) or "continue"


def _errors_label(errors) -> str:
    return "any error" if tuple(errors) == ("*",) else ", ".join(errors)


def shorten(text: str, width: int = LABEL_WIDTH) -> str:
    """Collapse whitespace and cut to ``width`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


# ----------------------------------------------------------------------------- ids and escaping
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def safe_id(node_id: str, prefix: str = "") -> str:
    """An id usable in mermaid and as an SVG/XML id, one-to-one with ``node_id``:
    ``get_logistics`` -> ``s_get_logistics``; pseudo nodes -> ``x_start``, ``x_on_error``,
    ``f_<child flow>``; an id with other characters gets them as ``_`` plus a short hash."""
    if node_id == START:
        body = "x_start"
    elif node_id == FLOW_HANDLERS:
        body = "x_on_error"
    elif node_id.startswith(CHILD_PREFIX):
        body = "f_" + _escape_id(node_id[len(CHILD_PREFIX):])
    else:
        body = "s_" + _escape_id(node_id)
    return prefix + body


def _escape_id(text: str) -> str:
    if not _UNSAFE.search(text):
        return text
    import hashlib

    return _UNSAFE.sub("_", text) + "_" + hashlib.sha1(text.encode()).hexdigest()[:6]


def edge_id(edge: Edge, prefix: str = "") -> str:
    """A stable SVG id for an edge: ``e_<kind>_<source>_<target>[_<n>]`` built from safe ids."""
    n = edge.key.rpartition("#")[2] if "#" in edge.key else ""
    return f"{prefix}e_{edge.kind}_{safe_id(edge.source)}_{safe_id(edge.target)}" + (f"_{n}" if n else "")


def dot_text(text: str) -> str:
    """User text made safe inside a DOT quoted string (backslashes and quotes escaped, lines joined by ``\\n``)."""
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return "\\n".join(escaped.split("\n"))


def mermaid_text(text: str) -> str:
    """User text made safe inside a mermaid quoted label (entity codes; lines joined by ``<br/>``)."""
    out = str(text).replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    return "<br/>".join(out.split("\n"))


# ----------------------------------------------------------------------------- DOT / SVG / PNG
def node_attrs(node: Node) -> dict:
    """Graphviz attributes of ``node`` (shape by type, label, tooltip, stable SVG id)."""
    attrs = dict(DOT_SHAPES.get(node.type, DOT_SHAPES["task"]))
    attrs.update(label=dot_text(node.label), tooltip=dot_text(node.tooltip or node.id), id=safe_id(node.id))
    return attrs


def edge_attrs(edge: Edge) -> dict:
    attrs = {"id": edge_id(edge), "tooltip": dot_text(edge.title or edge.label or edge.key)}
    if edge.label:
        attrs["label"] = dot_text(edge.label)
        attrs["labeltooltip"] = attrs["tooltip"]
    if edge.dashed:
        attrs.update(style="dashed", color="#bc4c00", fontcolor="#bc4c00")
    elif edge.kind == "child":
        attrs.update(style="dotted", arrowhead="empty")
    return attrs


def digraph(graph: FlowGraph):
    """A ``graphviz.Digraph`` of ``graph`` (imports graphviz)."""
    from graphviz import Digraph, nohtml

    g = Digraph(name=graph.flow, graph_attr={"rankdir": "TB", "fontname": "Helvetica", "id": "flow_" + _escape_id(graph.flow),
                                              "tooltip": dot_text(f"flow {graph.flow}")},
                node_attr={"fontname": "Helvetica", "fontsize": "11"}, edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    for node in graph.nodes.values():
        attrs = node_attrs(node)
        g.node(node.id, nohtml(attrs.pop("label")), **attrs)
    for edge in graph.edges:
        attrs = edge_attrs(edge)
        label = attrs.pop("label", None)
        g.edge(edge.source, edge.target, nohtml(label) if label else None, **attrs)
    return g


def to_dot(graph: FlowGraph) -> str:
    """DOT source of ``graph``: deterministic, nodes sorted by id, edges in the order of :attr:`FlowGraph.edges`."""
    return digraph(graph).source


def to_mermaid(graph: FlowGraph) -> str:
    """mermaid ``flowchart TD`` text of ``graph``: one line per node, then one per edge (error
    edges ``-.->``), each full condition as a ``%%`` comment, then class definitions per type."""
    lines = ["flowchart TD", f"  %% flow {graph.flow} (flowctl graph)"]
    for node in graph.nodes.values():
        lines.append("  " + mermaid_node(node))
    for edge in graph.edges:
        if edge.condition is not None and edge.label != edge.condition:
            lines.append(f"  %% {safe_id(edge.source)} -> {safe_id(edge.target)} when: {' '.join(edge.condition.split())}")
        lines.append("  " + mermaid_edge(edge))
    lines += mermaid_type_classes(graph.nodes.values())
    return "\n".join(lines) + "\n"


def mermaid_node(node: Node, prefix: str = "", mark: str = "") -> str:
    open_, close = MERMAID_SHAPES.get(node.type, ("[", "]"))
    label = mermaid_text(mark + node.label) if node.type != "start" else " "
    return f'{safe_id(node.id, prefix)}{open_}"{label}"{close}'


def mermaid_edge(edge: Edge, prefix: str = "", mark: str = "", arrow: str | None = None) -> str:
    arrow = arrow or ("-.->" if edge.dashed or edge.kind == "child" else "-->")
    text = (mark + edge.label).strip()
    label = f'|"{mermaid_text(text)}"|' if text else ""
    return f"{safe_id(edge.source, prefix)} {arrow}{label} {safe_id(edge.target, prefix)}"


_MERMAID_TYPE_STYLE = {
    "succeed": "fill:#dafbe1,stroke:#1a7f37", "fail": "fill:#ffebe9,stroke:#cf222e",
    "review": "fill:#fbefff,stroke:#8250df", "choice": "fill:#fff8c5,stroke:#9a6700",
    "unknown": "fill:#ffffff,stroke:#cf222e,stroke-dasharray:4 3",
    "flow_handlers": "fill:#fff1e5,stroke:#bc4c00", "start": "fill:#24292f,stroke:#24292f",
}


def mermaid_type_classes(nodes) -> list[str]:
    by_type: dict = {}
    for node in nodes:
        if node.type in _MERMAID_TYPE_STYLE:
            by_type.setdefault(node.type, []).append(safe_id(node.id))
    out = []
    for kind in sorted(by_type):
        out.append(f"  classDef t_{kind} {_MERMAID_TYPE_STYLE[kind]}")
        out.append(f"  class {','.join(by_type[kind])} t_{kind}")
    return out


def pipe(source, fmt: str) -> bytes:
    """Run Graphviz on a ``graphviz.Digraph`` (or DOT text) and return the ``fmt`` (svg|png) bytes.

    Raises :class:`UsageError` when the ``dot`` program is not installed; DOT and mermaid output
    need no binary.
    """
    import graphviz

    try:
        if isinstance(source, str):
            return graphviz.Source(source).pipe(format=fmt)
        return source.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise UsageError(
            f"{fmt.upper()} output needs the Graphviz 'dot' program, which is not installed",
            hint="install Graphviz (apt-get install graphviz, brew install graphviz), "
                 "or use --format dot or --format mermaid, which need no binary") from None
    except graphviz.CalledProcessError as exc:
        raise UsageError(f"Graphviz failed: {exc.stderr.decode(errors='replace').strip() if exc.stderr else exc}") from None


def render(graph: FlowGraph, fmt: str) -> str | bytes:
    """``graph`` as ``fmt``: ``dot`` and ``mermaid`` give text; ``svg`` text; ``png`` bytes."""
    if fmt == "dot":
        return to_dot(graph)
    if fmt == "mermaid":
        return to_mermaid(graph)
    if fmt == "svg":
        return pipe(digraph(graph), "svg").decode("utf-8")
    if fmt == "png":
        return pipe(digraph(graph), "png")
    raise UsageError(f"unknown graph format '{fmt}'", hint="use dot, svg, png or mermaid")
