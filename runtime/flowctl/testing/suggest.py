"""Suggested cases for what no golden case covers (``flowctl test --suggest``).

:func:`suggest` gives a :class:`Suggestion` per uncovered transition, handler and error edge of a
:class:`~flowctl.testing.coverage_items.FlowCoverage`: the shortest route to it from the flow's
start and a case skeleton (input, mocks along the route, review decisions, expected path) — built
from an existing case sharing the route when there is one, else from the JSON Schemas
(:func:`sample`), and bent by the ``when`` conditions on the way (:func:`facts`).
"""
from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass

from flowctl.testing.coverage_items import EDGES, HANDLERS, TRANSITIONS, FlowCoverage, Item


@dataclass
class Suggestion:
    item: Item
    route: list          # state ids from the start to the item's source (inclusive)
    notes: list          # what the skeleton could not decide
    skeleton: dict
    based_on: str | None
    file_name: str

    def text(self) -> str:
        import yaml

        lines = [f"uncovered {self.item.kind[:-1] if self.item.kind != EDGES else 'error edge'}: {self.item.label}",
                 f"  defined at {self.item.where}"]
        from flowctl.testing.runner import one_line

        lines.append(f"  reach it by: {one_line(self.route)}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        origin = f"built from case '{self.based_on}'" if self.based_on else "built from the JSON Schemas"
        lines.append(f"  skeleton ({origin}) for orchestration/tests/{self.skeleton.get('flow', '')}"
                     f"{'/' if self.skeleton.get('flow') else ''}{self.file_name}:")
        body = yaml.safe_dump({k: v for k, v in self.skeleton.items() if k != "flow"}, sort_keys=False,
                              allow_unicode=True, default_flow_style=None, width=100)
        lines.extend("    " + line for line in body.rstrip().splitlines())
        return "\n".join(lines)


def suggest(project, flow, cov: FlowCoverage, results=()) -> list:
    """A :class:`Suggestion` per uncovered item of ``cov`` (transitions, handlers, then error edges)."""
    from flowctl.check.topology import flow_graph

    graph = flow_graph(project, flow)
    cases = [r for r in results if r.case.flow == flow.id]
    out = []
    done_edges = set()
    for item in cov.uncovered():
        if item.kind == EDGES and (item.source, item.target) in done_edges:
            continue
        source = item.source if item.source != "*" else _flow_handler_source(project, flow, graph, item)
        if source is None:
            continue
        route, hops = _route(graph, flow.start, source)
        if route is None:
            continue
        s = _skeleton(project, flow, route, hops, item, source, cases)
        if item.target:
            done_edges.add((source, item.target))
        out.append(s)
    return out


def _flow_handler_source(project, flow, graph, item):
    """Where a flow handler is best shown firing: a side-effecting task for PolicyDenied, else the
    first task state reached from the start."""
    h = flow.on_error[item.key[1]]
    order = list(_bfs_order(graph, flow.start))
    tasks = [s for s in order if project.states.get(s) is not None and project.states[s].type == "task"]
    if "PolicyDenied" in h.errors:
        effect = [s for s in tasks if (project.resolve_tool(project.states[s].tool) or _NoContract).side_effecting]
        if effect:
            return effect[0]
    return tasks[0] if tasks else (order[0] if order else None)


class _NoContract:
    side_effecting = False


def _bfs_order(graph, start):
    seen, queue = {start}, deque([start])
    while queue:
        s = queue.popleft()
        yield s
        for dst, *_ in graph.get(s, ()):
            if dst not in seen:
                seen.add(dst)
                queue.append(dst)


def _route(graph, start, goal):
    """Shortest route start → goal: ``(states, hops)`` where ``hops[i]`` is the edge taken out of
    ``states[i]`` (``(dst, kind, doc, path)``); business transitions are preferred."""
    for kinds in (("transition",), ("transition", "error", "timeout"), None):
        prev = {start: None}
        queue = deque([start])
        while queue:
            s = queue.popleft()
            if s == goal:
                break
            for edge in graph.get(s, ()):
                dst, kind = edge[0], edge[1]
                if kinds is not None and kind not in kinds:
                    continue
                if dst not in prev:
                    prev[dst] = (s, edge)
                    queue.append(dst)
        if goal in prev:
            states, hops = [goal], []
            while prev[states[0]] is not None:
                s, edge = prev[states[0]]
                states.insert(0, s)
                hops.insert(0, edge)
            return states, hops
    return None, None


def _skeleton(project, flow, route, hops, item, source, cases) -> Suggestion:
    notes = []
    base = _best_case(route, cases)
    skeleton = {"flow": flow.id,
                "description": f"TODO: reaches {item.label}"}
    run_input = copy.deepcopy(base.case.input) if base else sample(flow.input_schema or {"type": "object"})
    mocks: dict = {}
    reviews: list = []
    tool_calls: dict = {}
    path = list(route)
    last_task = None
    tool_ref_of: dict = {}   # tool id -> the reference a state uses (for its contract's schema)

    def base_output(tool):
        if base is not None:
            for entry in base.case.mocks.get(tool, ()):
                if entry.has_output and isinstance(entry.output, dict):
                    return copy.deepcopy(entry.output)
        contract = project.resolve_tool(tool_ref_of.get(tool, tool))
        return sample((contract.output_schema if contract else None) or {"type": "object"})

    def add_mock(state_id, entry):
        state = project.states[state_id]
        contract = project.resolve_tool(state.tool) if state.tool else None
        tool = contract.id if contract else (state.tool or "?").split("@")[0]
        tool_ref_of[tool] = state.tool
        mocks.setdefault(tool, []).append(entry)
        tool_calls[state_id] = (tool, entry)
        return tool

    # the route: each hop says what the state it leaves must do
    visits: dict = {}
    for sid, hop in zip(route, hops + [None]):
        visits[sid] = visits.get(sid, 0) + 1
        state = project.states.get(sid)
        if state is None:
            continue
        final = hop is None
        if state.type == "task":
            last_task = sid
            tool = (project.resolve_tool(state.tool).id if project.resolve_tool(state.tool) else state.tool)
            tool_ref_of[tool] = state.tool
            if final and item.kind != TRANSITIONS:
                continue  # the item itself decides what this call does (below)
            if not final and hop[1] in ("error", "flow_error"):
                add_mock(sid, {"error": _error_for(project, flow, state, hop)})
                continue
            add_mock(sid, {"output": base_output(tool)})
        elif state.type == "review":
            if not final and hop[1] == "timeout":
                reviews.append({"timeout": True})
            elif not final or item.kind == TRANSITIONS:
                reviews.append({"decision": (state.get("decisions") or ["approve"])[0]})
        if not final and hop[1] == "transition":
            rule = _transition_at(flow, hop)
            if rule is not None:
                _bend(project, flow, rule, sid, last_task, tool_calls, reviews, run_input, notes, visits)

    # the item itself
    target = item.target
    state = project.states.get(source)
    if item.kind == TRANSITIONS:
        rule = flow.transitions[item.key[1]]
        _bend(project, flow, rule, source, last_task if state is None or state.type != "task" else source,
              tool_calls, reviews, run_input, notes, visits)
        target = rule.to
    elif item.key[0] == "timeout" or (item.kind == EDGES and item.key[1] == "timeout"):
        reviews.append({"timeout": True})
    else:
        if state is not None and state.type == "task":
            h = _handler_of(project, flow, item)
            name = _first_error(h.errors) if h is not None else "ToolError"
            add_mock(source, {"error": name, "message": f"mocked {name}"})
            if h is not None and h.fallback:
                fb = project.resolve_tool(h.fallback)
                if fb is not None:
                    tool_ref_of.setdefault(fb.id, h.fallback)
                    mocks.setdefault(fb.id, []).append({"output": base_output(fb.id)})
                    notes.append(f"the fallback {fb.id}'s output becomes the response of '{source}': its transitions decide "
                                 "where the run goes; complete expect.path")
            if name == "PolicyDenied":
                tool = (project.resolve_tool(state.tool).id if project.resolve_tool(state.tool) else state.tool)
                gates = sorted(p.name for p in project.policies.values() if tool in p.applies_to)
                notes.append(f"PolicyDenied comes from the gate: rather than mocking it, give {tool} an input that "
                             f"{' / '.join(gates) or 'no policy'} refuses (the real gate decides in flowctl test)")
        else:
            notes.append(f"'{source}' calls no tool: make its step fail (an expression error, a policy denial)")
    if target:
        path.append(target)
    target_state = project.states.get(target) if target else None
    status = {"succeed": "succeeded", "fail": "failed", "review": "paused"}.get(
        target_state.type if target_state else "", "TODO")
    if target_state is not None and not target_state.terminal and target_state.type != "review":
        notes.append(f"the run goes on after '{target}': complete expect.path and mock the tools it calls")
    skeleton["input"] = run_input
    skeleton["mocks"] = {tool: (entries[0] if len(entries) == 1 else entries) for tool, entries in mocks.items()}
    if reviews:
        skeleton["reviews"] = reviews
    skeleton["expect"] = {"path": path, "status": status}
    if item.kind == HANDLERS:
        name = {"state": f"{source}_on_error_{item.key[-1]}", "flow": f"{source}_flow_on_error_{item.key[-1]}",
                "timeout": f"{source}_on_timeout"}[item.key[0]] + ".yaml"
    else:
        name = f"{source}_to_{target}.yaml"
    return Suggestion(item, route, notes, skeleton, base.case.name if base else None, name.replace("*", "flow"))


def _best_case(route, cases):
    best, best_len = None, 0
    for r in cases:
        n = 0
        for a, b in zip(route, r.path):
            if a != b:
                break
            n += 1
        if n > best_len:
            best, best_len = r, n
    return best


def _transition_at(flow, hop):
    path = tuple(hop[3])
    for t in flow.transitions:
        if tuple(t.path) + ("to",) == path and hop[2] is flow.doc:
            return t
    return None


def _handler_of(project, flow, item):
    if item.key[0] == "state":
        return project.states[item.key[1]].on_error[item.key[2]]
    if item.key[0] == "flow":
        return flow.on_error[item.key[1]]
    if item.kind == EDGES:
        sid, kind, path = item.key
        handlers = project.states[sid].on_error if kind == "error" else flow.on_error
        for h in handlers:
            if tuple(h.path) + ("goto",) == tuple(path):
                return h
    return None


def _first_error(errors) -> str:
    names = [e for e in errors if e != "*"]
    return names[0] if names else "ToolError"


def _error_for(project, flow, state, hop) -> str:
    _dst, kind, _doc, path = hop
    handlers = state.on_error if kind == "error" else flow.on_error
    for h in handlers:
        if tuple(h.path) + ("goto",) == tuple(path):
            return _first_error(h.errors)
    return "ToolError"


# ------------------------------------------------------------------------------------ conditions
def facts(expr: str) -> list:
    """``[(op, [field, …], literal)]`` of the comparisons ``&&``-joined in ``expr`` (``||`` takes
    its left side); anything else is left to the author."""
    import jmespath

    try:
        tree = jmespath.compile(expr).parsed
    except Exception:  # noqa: BLE001
        return []
    out = []

    def fields(node):
        if node["type"] == "field":
            return [node["value"]]
        if node["type"] == "subexpression":
            parts = []
            for child in node["children"]:
                sub = fields(child)
                if sub is None:
                    return None
                parts.extend(sub)
            return parts
        return None

    def walk(node):
        t = node["type"]
        if t == "and_expression":
            for child in node["children"]:
                walk(child)
        elif t == "or_expression":
            walk(node["children"][0])
        elif t == "comparator":
            left, right = node["children"]
            if right["type"] != "literal" and left["type"] == "literal":
                left, right = right, left
            names = fields(left)
            if names and right["type"] == "literal":
                out.append((node["value"], names, right["value"]))
        elif t in ("field", "subexpression"):
            names = fields(node)
            if names:
                out.append(("truthy", names, True))

    walk(tree)
    return out


def _bend(project, flow, rule, sid, last_task, tool_calls, reviews, run_input, notes, visits=None) -> None:
    """Make ``rule`` the one taken out of ``sid``: its facts hold, and no earlier rule of ``sid``
    holds (checked by evaluating them on the skeleton; what cannot be arranged becomes a note)."""
    earlier = [t for t in flow.transitions_from(sid) if t.index < rule.index]
    target = tool_calls.get(last_task, (None, None))[1] if last_task else None
    output = target.get("output") if isinstance(target, dict) else None
    contract = None
    if last_task:
        st = project.states.get(last_task)
        contract = project.resolve_tool(st.tool) if st is not None and st.tool else None
    schema = contract.output_schema if contract else None
    state = project.states.get(sid)
    decisions = list((state.get("decisions") if state is not None else None) or [])
    pinned = set()
    for op, names, value in facts(rule.when) if rule.when else ():
        root, rest = names[0], names[1:]
        if root == "response" and isinstance(output, dict) and rest:
            if op == "eq":
                _set(output, rest, value)
                pinned.add(("response", *rest))
            elif op == "truthy" and not _get(output, rest):
                _set(output, rest, True)
                pinned.add(("response", *rest))
            else:
                notes.append(f"make \"{rule.when}\" hold for '{sid}' (set {'.'.join(rest)} in the mock of {last_task})")
        elif root == "review" and rest == ["decision"] and op == "eq":
            if reviews and "decision" in reviews[-1]:
                reviews[-1]["decision"] = value
            else:
                reviews.append({"decision": value})
            pinned.add(("review", "decision"))
        elif root == "input" and rest and op == "eq" and isinstance(run_input, dict):
            _set(run_input, rest, value)
            pinned.add(("input", *rest))
        elif root == "visits" and op in ("lt", "lte"):
            continue  # a loop guard; the first visits satisfy it
        else:
            notes.append(f"make \"{rule.when}\" hold when the run leaves '{sid}'")
            break

    def scope():
        review = {"decision": reviews[-1].get("decision")} if reviews and state is not None and state.type == "review" else None
        return {"response": output, "review": review, "visits": dict(visits or {}), "input": run_input,
                "context": {}, "params": dict(flow.params), "error": None, "state": None, "run": {}}

    def holds(expr) -> bool:
        from flowctl.expr.expressions import compile_expr
        from flowctl.expr.compile import truthy

        try:
            return truthy(compile_expr(expr).evaluate(scope()))
        except Exception:  # noqa: BLE001 - a condition on what the skeleton does not model
            return False

    literals: dict = {}
    for t in earlier:
        for op, names, value in facts(t.when) if t.when else ():
            if op == "eq":
                literals.setdefault(tuple(names), []).append(value)

    def holding(upto=None) -> int:
        return sum(1 for t in earlier[:upto] if t.when is not None and holds(t.when))

    for n, t in enumerate(earlier):  # make each earlier rule false, without making a rule before it true
        if t.when is None or not holds(t.when):
            continue
        best = None
        for op, names, value in facts(t.when):
            key = tuple(names)
            if op != "eq" or key in pinned:
                continue
            root, rest = names[0], names[1:]
            if root == "response" and isinstance(output, dict) and rest:
                sub = _schema_at(schema, rest)
                candidates = ([v for v in sub["enum"] if v != value] if isinstance(sub, dict)
                              and isinstance(sub.get("enum"), list) else [_other(value, sub, literals.get(key, ()))])
                get = lambda rest=rest: _get(output, rest)  # noqa: E731
                put = lambda v, rest=rest: _set(output, rest, v)  # noqa: E731
            elif root == "review" and rest == ["decision"] and reviews:
                candidates = [d for d in decisions if d != value] or [f"not-{value}"]
                get = lambda: reviews[-1].get("decision")  # noqa: E731
                put = lambda v: reviews[-1].__setitem__("decision", v)  # noqa: E731
            else:
                continue
            before = get()
            for candidate in candidates:
                put(candidate)
                if holding(n + 1) == 0 and (best is None or holding() < best[0]):
                    best = (holding(), put, candidate)
                put(before)
        if best is not None:
            best[1](best[2])
    for t in earlier:
        if t.when is None:
            continue
        if holds(t.when):
            notes.append(f"make \"{t.when}\" false when the run leaves '{sid}': it is checked first (line {t.line()})")
            continue
        unmodelled = [name for name in _scope_names(t.when) if name not in _MODELLED]
        if unmodelled:  # the skeleton cannot evaluate it as the run will: say so rather than guess
            notes.append(f"check that \"{t.when}\" is false when the run leaves '{sid}' (it is checked first, "
                         f"line {t.line()}; it reads {', '.join(unmodelled)}, which this suggestion does not model)")


_MODELLED = frozenset({"response", "review", "visits", "input", "params"})


def _scope_names(expr: str) -> list:
    import jmespath

    from flowctl.expr.expressions import _root_fields

    try:
        return _root_fields(jmespath.compile(expr).parsed)
    except Exception:  # noqa: BLE001 - validate reports what does not parse
        return []


def _get(obj, names):
    for n in names:
        if not isinstance(obj, dict) or n not in obj:
            return None
        obj = obj[n]
    return obj


def _set(obj, names, value) -> None:
    for n in names[:-1]:
        child = obj.get(n)
        if not isinstance(child, dict):
            child = obj[n] = {}
        obj = child
    obj[names[-1]] = value


def _schema_at(schema, names):
    for n in names:
        if not isinstance(schema, dict):
            return None
        schema = (schema.get("properties") or {}).get(n)
    return schema


def _other(value, schema, avoid=()):
    if isinstance(schema, dict) and isinstance(schema.get("enum"), list):
        choices = [v for v in schema["enum"] if v != value]
        preferred = [v for v in choices if v not in avoid]
        if preferred or choices:
            return (preferred or choices)[0]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return f"{value}_other"
    return "TODO"


def sample(schema, name: str = ""):
    """A value that fits ``schema`` where that is easy (enums, consts, defaults, examples, types, a
    string a ``pattern`` matches: :mod:`flowctl.testing.patterns`); strings it cannot guess are
    ``"TODO"``."""
    if not isinstance(schema, dict):
        return "TODO"
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return copy.deepcopy(schema["examples"][0])
    for key in ("oneOf", "anyOf"):
        options = [o for o in schema.get(key) or () if not (isinstance(o, dict) and o.get("type") == "null")]
        if options:
            return sample(options[0], name)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        keys = schema.get("required") or list(props)
        return {k: sample(props.get(k, {}), k) for k in keys}
    if t == "array":
        n = schema.get("minItems", 0)
        return [sample(schema.get("items") or {}, name) for _ in range(max(n, 1 if n else 0))]
    if t == "integer":
        return int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1 if "exclusiveMinimum" in schema else 0))
    if t == "number":
        if "minimum" in schema:
            return schema["minimum"]
        return schema["exclusiveMinimum"] + 1 if "exclusiveMinimum" in schema else 0
    if t == "boolean":
        return False
    if t == "null":
        return None
    if isinstance(schema.get("pattern"), str):  # a string the pattern matches, if one can be built
        from flowctl.testing.patterns import example

        found = example(schema["pattern"])
        if found is not None and len(found) >= schema.get("minLength", 0):
            return found
    return "TODO"
