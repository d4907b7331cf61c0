"""Static data-flow analysis: what every name in scope holds at every state of a flow.

(The module is ``flowctl.check.dataflow`` so that the package attribute ``flowctl.dataflow`` stays the
function, as ``flowctl.check.checks`` does for ``flowctl.validate``.)

``flowctl.dataflow(project, flow)`` walks a flow's graph — business transitions, a state's own
``on_error`` gotos and fallbacks, review ``on_timeout`` gotos, the flow's ``on_error`` gotos, and
child flows of ``parallel``/``map``/``subflow`` states — to a fixpoint, and returns a
:class:`FlowData`: per state the :class:`~flowctl.check.shapes.Shape` of the scope on entry (``input``
from the flow's ``input_schema``; ``context`` keys from every ``set`` on the paths that reach the
state, each *always* or *sometimes* present — absent keys are *never* set there; ``response``
from the contract's ``output_schema``, a fallback's, or a child flow's ``output``; ``review``,
``error``, ``visits``, ``state``, ``run``, ``params``, ``item``/``index`` with their fixed shapes),
plus the diagnostics the shapes prove:

======  =========  =================================================================================
FC801   error      a path into a field no path defines (``context.frad``: "did you mean ``fraud``")
FC802   error      a comparison of two known, different JSON types (``number > string``)
FC803   error      a required tool input read from a context key some path into the state never sets
FC804   warning    a context key only *sometimes* set, compared or passed to a function in a ``when``
FC805   error      a JMESPath function given an argument type it rejects (a warning for the elements
                   of an array: an empty one passes)
======  =========  =================================================================================

Sound where it speaks, silent where it cannot know: unknown shapes (no schema, ``review.data`` of a
review without ``data_schema``, ``$ref``) produce nothing; a review's ``data_schema`` gives
``review.data`` its shape (``review.data.amount`` where the schema has no ``amount``: FC801). Error edges are followed only where the state can
raise a matching error (a ``PolicyDenied`` handler is not an edge out of a ``choice``).
Never raises for project content.

The pieces: which edges the analysis follows out of a state and which errors it can raise there
(:mod:`flowctl.check.edges`); how a ``set`` or a ``when`` changes the scope's shape
(:mod:`flowctl.check.facts`); the expression inference (:mod:`flowctl.check.infer`).
"""
from __future__ import annotations

import heapq
from collections import deque

from flowctl.check import shapes as S
from flowctl.check.shapes import ANY, BOOLEAN, NULL, NUMBER, STRING, Shape, join
from flowctl.check.infer import Inference, Site, Value, parse, scope_roots
from flowctl.check.edges import (
    CHILD_TYPES, MOVES, calls_side_effect, can_leave, follow_edges, may_raise, moves_from)
from flowctl.check.facts import (
    asserted, contract_output, refine, sets_key, strip_null, widen, with_roots, write_key)


_ERROR = S.obj({"type": STRING, "code": ANY, "message": STRING, "state": ANY, "attempt": ANY}, closed=True)
#: visits is not tracked in the shapes (it would grow them by a key per state): whether
#: ``visits.X`` can be defined at S is asked of the graph instead (:meth:`_Analysis.may_precede`)
_VISITS = S.obj({}, closed=False)
_REVIEW = S.obj({"decision": STRING, "data": ANY, "by": ANY, "at": ANY, "state": STRING, "step": ANY,
                 "policy": BOOLEAN}, closed=True)


def _review_shape(state) -> Shape:
    """``review`` after a review state: its ``data`` as the state's ``data_schema`` says (free-form
    without one: the decision's data is then whatever was given)."""
    schema = getattr(state, "data_schema", None)
    if not isinstance(schema, dict) or not schema:
        return _REVIEW
    return S.obj({**_REVIEW.props, "data": (S.from_schema(schema), True)}, closed=True)


#: ``calls``: an agent state's tool calls of the visit (engine/states/agent.py); absent (null) elsewhere
_STATE_INFO = S.obj({"id": STRING, "entered_at": STRING, "attempt": NUMBER, "calls": S.join(NULL, S.array(
    S.obj({"tool": STRING, "ok": BOOLEAN, "error": S.join(NULL, STRING)}, closed=True)))}, closed=True)
_RUN_INFO = S.obj({"id": STRING, "flow": STRING, "flow_version": ANY, "started_at": STRING, "parent": ANY,
                   "depth": NUMBER}, closed=True)


class FlowData:
    """The result of :func:`dataflow` for one flow.

    ``entry``: state id -> scope :class:`~flowctl.check.shapes.Shape` on entry (reachable states only);
    ``output``: the shape of the flow's output; ``diagnostics``: FC801–FC805 findings, located.
    """

    def __init__(self, flow):
        self.flow = flow
        self.entry: dict = {}
        self.output: Shape = ANY
        self.diagnostics: list = []

    def defined(self, state_id: str) -> dict:
        """``{"always": [...], "sometimes": [...]}``: the context keys (dotted for nested keys set
        by ``set``) defined on entry to ``state_id``, plus ``error``/``review`` when in scope."""
        scope = self.entry.get(state_id)
        out = {"always": [], "sometimes": []}
        if scope is None:
            return out
        ctx, _ = scope.field("context")
        for name, (shape, always) in sorted(ctx.props.items()):
            out["always" if always else "sometimes"].append(f"context.{name}")
        for root in ("error", "review"):
            shape, _ = scope.field(root)
            if shape.types is None or shape.non_null():
                out["sometimes" if shape.may_be("null") else "always"].append(root)
        return out


# ------------------------------------------------------------------------------ entry point
def dataflow(project, flow, _cache=None) -> FlowData:
    """Analyse ``flow`` (a :class:`~flowctl.definition.model.Flow` or its id) of ``project``.

    Returns a :class:`FlowData`. Raises ``KeyError`` for an unknown flow id; never for content.
    """
    if isinstance(flow, str):
        flow = project.flows[flow]
    cache = _cache if _cache is not None else {}
    try:
        return _Analysis(project, flow, cache).run()
    finally:
        MOVES.clear()


#: re-raise a failure of the analysis itself instead of saying nothing about the flow (tests set it)
RAISE = False


def check_dataflow(project):
    """FC801–FC805 for every flow of ``project`` (the ``validate`` check)."""
    cache: dict = {}
    try:
        for flow in project.flows.values():
            if flow.start not in project.states:
                continue
            try:
                data = _flow_data(project, flow, cache)
            except RecursionError:  # pathological nesting (a chain of hundreds of child flows): silent
                continue
            except Exception:  # noqa: BLE001 - the analysis must not make validate crash: silent where unsure
                if RAISE:
                    raise
                continue
            yield from data.diagnostics
    finally:
        MOVES.clear()  # holding the flows would keep the whole project alive (slow to free, at exit)


def _flow_data(project, flow, cache):
    found = cache.get(flow.id)
    if isinstance(found, FlowData):
        return found
    return _Analysis(project, flow, cache).run()


class _Analysis:
    def __init__(self, project, flow, cache):
        self.project = project
        self.flow = flow
        self.cache = cache
        self.data = FlowData(flow)
        self.sites: dict = {}
        self.exits: dict = {}  # state id -> (scope after it, scope when it raised), at the fixpoint
        self.reach: dict = {}

    # -------------------------------------------------------------- driver
    def run(self) -> FlowData:
        cache, flow = self.cache, self.flow
        cache[flow.id] = "busy"  # a child flow that calls back gets an unknown output
        try:
            self._fixpoint()
            self._check()
            self.data.entry = {sid: self.full(fact) for sid, fact in self.data.entry.items()}
        finally:
            cache[flow.id] = self.data
        return self.data

    def _initial(self) -> Shape:
        flow = self.flow
        input_shape = S.from_schema(flow.input_schema) if isinstance(flow.input_schema, dict) else ANY
        params = flow.params if isinstance(flow.params, dict) else {}
        # the names whose shape is the same at every state stay out of the per-state scopes
        self.const = {"input": (input_shape, True), "params": (S.obj({str(k): ANY for k in params}, closed=True), True),
                      "visits": (_VISITS, True), "state": (_STATE_INFO, True), "run": (_RUN_INFO, True),
                      "item": (NULL, True), "index": (NULL, True)}
        return S.obj({"context": S.obj({}, closed=True), "response": NULL, "error": NULL, "review": NULL}, closed=True)

    def full(self, fact: Shape) -> Shape:
        """The whole scope: ``fact`` (context, response, error, review …) and the constant names."""
        return Shape(fact.types, {**self.const, **fact.props}, True)

    def _fixpoint(self):
        states = self.project.states
        entry = self.data.entry
        start = self.flow.start
        entry[start] = self._initial()
        order = self._rpo()
        work = [(order.get(start, 0), start)]  # reverse post-order first: a state after what feeds it
        queued = {start}
        updates: dict = {}
        while work:
            sid = heapq.heappop(work)[1]
            queued.discard(sid)
            state = states.get(sid)
            if state is None:
                continue
            for target, fact in self._successors(state, entry[sid]):
                if target not in states:
                    continue
                old = entry.get(target)
                new = fact if old is None else join(old, fact)
                if old is not None and new == old:
                    continue
                updates[target] = updates.get(target, 0) + 1
                if updates[target] > 40:  # give up on precision for this state rather than loop
                    new = widen(new)
                    if old is not None and new == old:
                        continue
                entry[target] = new
                if target not in queued:
                    queued.add(target)
                    heapq.heappush(work, (order.get(target, len(order)), target))

    def _rpo(self) -> dict:
        """state id -> its place in reverse post-order of the graph from the start (no recursion)."""
        project, flow = self.project, self.flow
        post, seen = [], {flow.start}
        stack = [(flow.start, None)]
        while stack:
            sid, it = stack[-1]
            if it is None:
                state = project.states.get(sid)
                it = iter([d for d, _, _ in follow_edges(project, flow, state)] if state is not None else [])
                stack[-1] = (sid, it)
            nxt = next((d for d in it if d not in seen), None)
            if nxt is None:
                post.append(sid)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, None))
        return {sid: i for i, sid in enumerate(reversed(post))}

    # -------------------------------------------------------------- transfer
    def _successors(self, state, fact):
        """(target, scope on the way in) for every edge out of ``state``; records the state's exit
        scopes (normal or through a fallback, and on error) in ``self.exits``."""
        flow = self.flow
        exits = [self._exit(state, fact)]
        err_fact = with_roots(join(fact, exits[0]), error=_ERROR)
        for h in state.on_error:
            if h.fallback and may_raise(self.project, state, h.errors):
                after = self._apply_set(err_fact, h.set)
                contract = self.project.resolve_tool(h.fallback)
                exits.append(with_roots(after, response=self._output(contract)))
        exit_fact = S.join_all(exits)
        self.exits[state.id] = (exit_fact, err_fact)
        for t in moves_from(flow, state.id):
            out = self._apply_set(refine(exit_fact, t.when), t.set)  # set sees what the when proved
            yield t.to, with_roots(out, error=NULL)
        caught_all = False
        for h in state.on_error:
            if caught_all:
                break
            caught_all = "*" in h.errors
            if h.goto and may_raise(self.project, state, h.errors):
                yield h.goto, self._apply_set(err_fact, h.set)
        timeout = state.get("on_timeout") if state.type == "review" else None
        if isinstance(timeout, dict) and isinstance(timeout.get("goto"), str) and state.get("timeout") is not None:
            yield timeout["goto"], with_roots(fact, error=_ERROR)
        if can_leave(self.flow, state) and not caught_all:
            for h in flow.on_error:
                if h.goto and may_raise(self.project, state, h.errors):
                    yield h.goto, self._apply_set(err_fact, h.set)
                if "*" in h.errors:
                    break

    def _successors_exits(self, state, fact):
        for _ in self._successors(state, fact):
            pass
        return self.exits[state.id]

    def may_precede(self, first: str, then: str) -> bool:
        """Can a run of this flow enter ``first`` before (or as) ``then``? (``visits.first`` at ``then``)"""
        if first == then:
            return first in self.data.entry
        if first not in self.data.entry:
            return False
        found = self.reach.get(first)
        if found is None:
            found, queue = {first}, deque([first])
            while queue:
                state = self.project.states.get(queue.popleft())
                if state is None:
                    continue
                for dst, _, _ in follow_edges(self.project, self.flow, state):
                    if dst not in found:
                        found.add(dst)
                        queue.append(dst)
            self.reach[first] = found
        return then in found

    def _exit(self, state, fact) -> Shape:
        kind = state.type
        if kind == "task":
            contract = self.project.resolve_tool(state.tool) if isinstance(state.tool, str) else None
            out = with_roots(fact, response=self._output(contract))
            if calls_side_effect(self.project, state):  # a policy's review_when pauses for a review first
                out = with_roots(out, review=join(fact.field("review")[0], _REVIEW))
            return out
        if kind in ("llm", "agent"):  # the reply's JSON, as its output_schema says
            schema = state.get("output_schema")
            out = with_roots(fact, response=S.from_schema(schema) if isinstance(schema, dict) else ANY)
            if kind == "agent" and calls_side_effect(self.project, state):  # a tool's gate review may pause it
                out = with_roots(out, review=join(fact.field("review")[0], _REVIEW))
            return out
        if kind == "pass":
            return self._apply_set(fact, state.get("set"))
        if kind == "review":
            return with_roots(fact, review=_review_shape(state))
        if kind in CHILD_TYPES:
            return with_roots(fact, response=self._children_output(state, fact))
        return fact

    def _output(self, contract) -> Shape:
        """The shape of ``contract``'s output (cached per contract for the whole validate run)."""
        if contract is None:
            return ANY
        key = ("output", id(contract))
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = contract_output(contract)
            self.cache[("keep", id(contract))] = contract  # the id stays this contract's while cached
        return found

    def _children_output(self, state, fact) -> Shape:
        tolerated = bool(state.get("tolerated_failures"))
        failed = S.obj({"error": ANY}, closed=True)

        def out(flow_id):
            if not isinstance(flow_id, str) or flow_id not in self.project.flows:
                return ANY
            found = self.cache.get(flow_id)
            if found == "busy":
                return ANY
            if not isinstance(found, FlowData):
                child = self.project.flows[flow_id]
                if child.start not in self.project.states:
                    return ANY
                found = _Analysis(self.project, child, self.cache).run()
            shape = found.output
            return join(shape, failed) if tolerated else shape

        if state.type == "subflow":
            return out(state.get("flow"))
        if state.type == "parallel":
            branches = state.get("branches")
            if not isinstance(branches, list):
                return ANY
            outs = [out(b) for b in branches]
            return S.array(S.join_all(outs) if outs else Shape(()), prefix=outs)
        if state.get("batch"):
            return S.array(ANY)
        return S.array(out(state.get("flow")))

    def _apply_set(self, fact, mapping) -> Shape:
        if not isinstance(mapping, dict) or not mapping:
            return fact
        ctx, _ = fact.field("context")
        values = [(str(k), self._mapping_shape(v, fact)) for k, v in mapping.items()]
        for key, value in values:  # depth-capped, so that a loop of set: {a: [context.a]} ends
            ctx = write_key(ctx, key.split("."), S.capped(value))
        return with_roots(fact, context=ctx)

    def _mapping_shape(self, value, fact, item=None) -> Shape:
        if isinstance(value, str):
            tree = parse(value)
            if tree is None:
                return ANY
            return self.infer(value, tree, fact).shape
        if isinstance(value, dict):
            return S.obj({str(k): self._mapping_shape(v, fact) for k, v in value.items()}, closed=True)
        if isinstance(value, list):
            items = [self._mapping_shape(v, fact) for v in value[:64]]
            return S.array(S.join_all(items) if items else Shape(()), prefix=items) if len(value) <= 64 else S.array(ANY)
        return S.of_value(value)

    # -------------------------------------------------------------- checking
    def _site(self, doc, path, text, state_id, fact, condition=False):
        key = (doc.file, tuple(path))
        found = self.sites.get(key)
        if found is None:
            self.sites[key] = [Site(doc, path, text, state_id, condition, self.flow.id), fact]
        else:
            found[1] = join(found[1], fact)
            if found[0].state != state_id:
                found[0].state = None  # evaluated at several states: "this point"

    def _mapping_sites(self, doc, path, value, state_id, fact):
        if isinstance(value, str):
            self._site(doc, path, value, state_id, fact)
        elif isinstance(value, dict):
            for k, v in value.items():
                self._mapping_sites(doc, path + (k,), v, state_id, fact)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._mapping_sites(doc, path + (i,), v, state_id, fact)

    def _collect(self):
        states, flow = self.project.states, self.flow
        outputs = []
        for sid, fact in self.data.entry.items():
            state = states.get(sid)
            if state is None:
                continue
            d, doc = state.raw, state.doc
            for key in ("input", "show"):
                if key in d:
                    self._mapping_sites(doc, (key,), d[key], sid, fact)
            if state.type == "task":
                self._key_site(state, fact)
            if state.type == "pass" and "set" in d:
                self._mapping_sites(doc, ("set",), d["set"], sid, fact)
            if state.type == "map":
                items_shape = ANY
                if isinstance(d.get("items"), str):
                    self._site(doc, ("items",), d["items"], sid, fact)
                    tree = parse(d["items"])
                    if tree is not None:
                        items_shape = self.infer(d["items"], tree, fact).shape
                element = items_shape.element() if items_shape.known else ANY
                if "item_input" in d:
                    self._mapping_sites(doc, ("item_input",), d["item_input"], sid,
                                        with_roots(fact, item=strip_null(element), index=NUMBER))
            if isinstance(d.get("until"), str):
                self._site(doc, ("until",), d["until"], sid, fact)
            for key in ("timeout", "error", "cause"):
                if isinstance(d.get(key), dict) and isinstance(d[key].get("expr"), str):
                    self._site(doc, (key, "expr"), d[key]["expr"], sid, fact)
            exit_all, err_fact = self.exits.get(sid) or self._successors_exits(state, fact)
            for h in state.on_error:
                if h.set and may_raise(self.project, state, h.errors):
                    self._mapping_sites(doc, h.path + ("set",), h.set, sid, err_fact)
            for t in moves_from(flow, sid):
                if t.when is not None:
                    self._site(flow.doc, t.path + ("when",), t.when, sid, exit_all, condition=True)
                if t.set:
                    self._mapping_sites(flow.doc, t.path + ("set",), t.set, sid, exit_all)
            if can_leave(flow, state):
                for h in flow.on_error:
                    if h.set and may_raise(self.project, state, h.errors):
                        self._mapping_sites(flow.doc, h.path + ("set",), h.set, sid, err_fact)
            if state.type == "succeed":
                outputs.append(fact)
        if flow.output is not None and outputs:
            out_fact = S.join_all(outputs)
            self._mapping_sites(flow.doc, ("output",), flow.output, None, out_fact)
        if outputs:
            fact = S.join_all(outputs)
            if flow.output is None:
                self.data.output = fact.field("context")[0]
            else:
                self.data.output = self._mapping_shape(flow.output, fact)

    def _key_site(self, state, fact):
        """The contract's ``idempotency_key`` expression, read where this task calls it: ``input`` is
        the tool input (the state's input mapping, else the contract's input_schema), ``run_input``
        the run's input, the rest the state's scope (:func:`flowctl.engine.calls._key`)."""
        contract = self.project.resolve_tool(state.tool) if isinstance(state.tool, str) else None
        if contract is None or not isinstance(contract.idempotency_key, str) or getattr(contract, "doc", None) is None:
            return
        if isinstance(state.input, dict):
            given = self._mapping_shape(state.input, fact)
        elif isinstance(contract.input_schema, dict):
            given = S.from_schema(contract.input_schema)
        else:
            given = ANY
        self._site(contract.doc, ("idempotency_key",), contract.idempotency_key, state.id,
                   with_roots(fact, input=given, run_input=self.const["input"][0]))

    def _check(self):
        self._collect()
        found = []
        for site, fact in self.sites.values():
            tree = parse(site.text)
            if tree is None or tree.get("type") in ("literal", "field"):
                continue  # a literal or a bare name proves nothing (FC406 has the names)
            self.infer(site.text, tree, fact, site)
            found.extend(site.found.values())
        found.extend(self._required_inputs())
        self.data.diagnostics = found

    def infer(self, text, tree, fact, site=None) -> Value:
        """:class:`Inference` of ``tree`` on ``fact``, memoised on the shapes of the names it reads
        (shared shapes make most lookups hits: the same ``input``, the same contract's output).
        With a ``site``, findings are reported there; a memo says when there are none."""
        key = None
        roots = scope_roots(text, tree)
        props, const = fact.props, self.const
        if roots is not None:
            parts = tuple((props.get(r) or const.get(r) or (None,))[0] for r in roots)
            key = (text, tuple(map(id, parts)), site.state if site is not None and "visits" in roots else None,
                   site is not None and site.condition)
            found = self.cache.get(key)
            if found is not None and (site is None or not found[1]):
                return found[0]
        val = Inference(self, site).run(tree, self.full(fact))
        if key is not None:
            self.cache[key] = (val, bool(site.found) if site is not None else True, parts)
        return val

    def sometimes(self, site, label):
        """FC804 for ``label`` (a context key) read in a condition at ``site``."""
        key = label.split(".")[1] if "." in label else label
        path = self.unset_path(key, site.state) if site.state else None
        via = f" (not on the path {' → '.join(path)})" if path else ""
        where = f"'{site.state}'" if site.state else "this point"
        site.report("FC804", f"`{label}` is set only on some paths into {where}{via}; there it is null and this "
                    f"condition is false", key,
                    hint=f"set {key} on every path, or test it first: {label} && …  /  {label} != `null`")

    # -------------------------------------------------------------- FC803
    def _required_inputs(self):
        out = []
        for sid, fact in self.data.entry.items():
            state = self.project.states.get(sid)
            if state is None or state.type != "task" or not isinstance(state.input, dict):
                continue
            schemas = []
            contract = self.project.resolve_tool(state.tool) if isinstance(state.tool, str) else None
            if contract is not None and isinstance(contract.input_schema, dict):
                schemas.append((contract.input_schema, contract.ref))
            if isinstance(state.input_schema, dict):
                schemas.append((state.input_schema, f"the input_schema of '{sid}'"))
            done = set()
            for schema, owner in schemas:
                required = schema.get("required")
                props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
                if not isinstance(required, list):
                    continue
                for name in required:
                    if not isinstance(name, str) or name in done or not isinstance(state.input.get(name), str):
                        continue
                    tree = parse(state.input[name])
                    if tree is None:
                        continue
                    val = self.infer(state.input[name], tree, fact)
                    if not val.unsure or not val.label or S.accepts_null(props.get(name)) is not False:
                        continue
                    key = val.unsure.split(".")[1]
                    path = self.unset_path(key, sid)
                    if not path:
                        continue
                    done.add(name)
                    out.append(state.doc.diag(
                        "FC803", f"input '{name}', which {owner} requires, reads `{val.label}`; on the path "
                        f"{' → '.join(path)} (flow '{self.flow.id}') nothing sets context.{key}, so '{name}' is null "
                        f"and the call fails with SchemaMismatch", ("input", name),
                        hint=f"set {key} on that path, or give a default: {state.input[name]} || <value>"))
        return out

    def unset_path(self, key: str, target: str):
        """The shortest path of states from the start to ``target`` on which nothing sets
        ``context.<key>`` (None if every path sets it)."""
        project, flow = self.project, self.flow
        start = flow.start
        prev = {start: None}
        queue = deque([start])
        while queue:
            sid = queue.popleft()
            if sid == target:
                path = []
                while sid is not None:
                    path.append(sid)
                    sid = prev[sid]
                return path[::-1]
            state = project.states.get(sid)
            if state is None or sid not in self.data.entry:
                continue
            for dst, sets, when in follow_edges(project, flow, state):
                if dst in prev or dst not in self.data.entry:
                    continue
                if any(sets_key(m, key) for m in sets) or (when and key in asserted(when)):
                    continue
                prev[dst] = sid
                queue.append(dst)
        return None
