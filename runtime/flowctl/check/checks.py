"""``flowctl.validate(project)`` (this module is ``flowctl.check.checks``, so that the package attribute
``flowctl.validate`` stays the function): every check, one small function each, run from a table.

Each check takes the :class:`~flowctl.definition.model.Project` and yields located
:class:`~flowctl.diagnostics.Diagnostic` objects; :data:`CHECKS` lists them in order (as
jsonschema's ``_keywords`` table does for keywords). Codes are described in
:mod:`flowctl.diagnostics`. Loading diagnostics (syntax, schema, ids) come first.

The checks live where their concept does: the graph checks (FC2xx, FC107/FC108) and
:func:`flow_graph`/:func:`child_flows` in :mod:`flowctl.check.topology`, ``--import-check``
(FC603, :func:`import_check`, :func:`resolve_callable_problem`) in :mod:`flowctl.check.callables`;
this module re-exports them, so ``from flowctl.check.checks import flow_graph`` keeps working.
"""
from __future__ import annotations

from flowctl.definition import versions
from flowctl.check.decisions import check_review_decisions
from flowctl.check.dataflow import check_dataflow
from flowctl.check.policyflow import check_policy_dataflow
from flowctl.diagnostics import Diagnostic, sort_key
from flowctl.definition.durations import parse_duration
from flowctl.expr.expressions import lint as lint_expression
from flowctl.check.gate import check_gate, check_helpers_outside_the_gate, check_same_function, check_tool_code, tool_refs
from flowctl.definition.model import Project
from flowctl.definition.schema_lint import schema_problems
from flowctl.definition.kinds import did_you_mean, misspelt_error
from flowctl.check.callables import import_check, resolve_callable_problem
from flowctl.check.topology import check_children, check_graph, child_flows, flow_graph
from flowctl.check.models import RUN_SCOPE, check_model_states
from flowctl.check.toolnames import check_tool_names
from flowctl.check.masked import check_masked_show

__all__ = ["CHECKS", "SCOPES", "RUN_SCOPE", "validate", "iter_expressions", "policy_regex_problems",
           "flow_graph", "child_flows", "import_check", "resolve_callable_problem"]


# ----------------------------------------------------------------------------- helpers
def _expressions_in(value, path):
    """(path, text) of every expression in a mapping: strings are expressions, others literals."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _expressions_in(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _expressions_in(v, path + (i,))


#: The names an expression can start with, by where it is written (scope.py, task.py, policy.py).
# RUN_SCOPE (imported above from flowctl.check.models, where the template checks need it too):
# input, params, context, response, error, review, visits, state, run, item, index
SCOPES = {"run": RUN_SCOPE, "key": RUN_SCOPE + ("run_input",),
          "policy": ("input", "run", "flow", "tool", "run_input", "params", "context")}


def iter_expressions(project: Project):
    """Every expression in the project: ``(doc, path, text, scope)``; ``scope`` names the
    :data:`SCOPES` entry it is evaluated against."""
    for state in project.states.values():
        d, doc = state.raw, state.doc
        for key in ("input", "set", "show", "item_input"):
            if key in d:
                yield from ((doc, p, t, "run") for p, t in _expressions_in(d[key], (key,)))
        for key in ("until", "items"):
            if isinstance(d.get(key), str):
                yield doc, (key,), d[key], "run"
        for key in ("timeout", "error", "cause"):
            if isinstance(d.get(key), dict) and isinstance(d[key].get("expr"), str):
                yield doc, (key, "expr"), d[key]["expr"], "run"
        for h in state.on_error:
            if h.set:
                yield from ((doc, p, t, "run") for p, t in _expressions_in(h.set, h.path + ("set",)))
    for flow in project.flows.values():
        doc = flow.doc
        if flow.output is not None:
            yield from ((doc, p, t, "run") for p, t in _expressions_in(flow.output, ("output",)))
        for t in flow.transitions:
            if t.when is not None:
                yield doc, t.path + ("when",), t.when, "run"
            if t.set:
                yield from ((doc, p, x, "run") for p, x in _expressions_in(t.set, t.path + ("set",)))
        for h in flow.on_error:
            if h.set:
                yield from ((doc, p, t, "run") for p, t in _expressions_in(h.set, h.path + ("set",)))
    for versions_ in project.contracts.values():
        for c in versions_:
            if c.idempotency_key:
                yield c.doc, ("idempotency_key",), c.idempotency_key, "key"
    for policy in project.policies.values():
        for check in policy.allow:
            yield policy.doc, check.path + ("field",), check.field_expr, "policy"
            operands = check.value if check.op == "range" and isinstance(check.value, list) else [check.value]
            for i, operand in enumerate(operands):
                if isinstance(operand, dict) and isinstance(operand.get("expr"), str):
                    sub = (check.op, i, "expr") if check.op == "range" else (check.op, "expr")
                    yield policy.doc, check.path + sub, operand["expr"], "policy"
        if policy.review_when:
            yield policy.doc, ("review_when",), policy.review_when, "policy"


def _unknown(project: Project, kind: str, name: str) -> bool:
    table = {"state": project.states, "flow": project.flows}[kind]
    return name not in table and (kind, name) not in project.broken


def _tool_problem(project: Project, ref: str):
    """None if ``ref`` resolves; else (message, hint)."""
    tool_id, constraint = versions.split_ref(ref)
    try:
        versions.check_constraint(constraint)
    except ValueError as exc:
        return str(exc), "constraints: 1.2.3, ^1, ~1.2, latest"
    if tool_id not in project.contracts:
        if ("contract", tool_id) in project.broken:
            return None
        hint = did_you_mean(tool_id, project.contracts) or f"add orchestration/contracts/{tool_id}.v1.0.0.yaml"
        return f"no contract '{tool_id}'", hint
    if project.resolve_tool(ref) is None:
        have = ", ".join(c.version for c in project.contracts[tool_id])
        return f"no version of '{tool_id}' satisfies '{constraint}'", f"available: {have}"
    return None


# ----------------------------------------------------------------------------- checks
def check_references(project: Project):
    """FC101 unknown state, FC102 unknown tool/version, FC103 policy names an unknown tool, FC106 unknown flow."""
    for flow in project.flows.values():
        for name, path in flow.named_states():
            if _unknown(project, "state", name):
                yield flow.doc.diag("FC101", f"unknown state '{name}'", path,
                                    hint=did_you_mean(name, project.states) or f"add orchestration/states/{name}.yaml")
    for state in project.states.values():
        doc = state.doc
        for ref, path in tool_refs(state):
            if ref:
                problem = _tool_problem(project, ref)
                if problem:
                    yield doc.diag("FC102", problem[0], path, hint=problem[1])
        gotos = [(h.goto, h.path + ("goto",)) for h in state.on_error if h.goto]
        on_timeout = state.raw.get("on_timeout") or {}
        if on_timeout.get("goto"):
            gotos.append((on_timeout["goto"], ("on_timeout", "goto")))
        for name, path in gotos:
            if _unknown(project, "state", name):
                yield doc.diag("FC101", f"unknown state '{name}'", path,
                               hint=did_you_mean(name, project.states) or f"add orchestration/states/{name}.yaml")
        flows = list(state.raw.get("branches") or ())
        flows += [state.raw["flow"]] if isinstance(state.raw.get("flow"), str) else []
        for name in flows:
            if _unknown(project, "flow", name):
                path = ("branches", flows.index(name)) if name in (state.raw.get("branches") or ()) else ("flow",)
                yield doc.diag("FC106", f"unknown flow '{name}'", path,
                               hint=did_you_mean(name, project.flows) or f"add orchestration/transitions/{name}.yaml")
    for flow in project.flows.values():
        for h in flow.on_error:
            if h.fallback:
                yield flow.doc.diag("FC010", "a flow-level handler cannot name a fallback tool", h.path + ("fallback",),
                                    hint="put the fallback on the state's own on_error")
    for policy in project.policies.values():
        for i, tool_id in enumerate(policy.applies_to):
            if tool_id not in project.contracts and ("contract", tool_id) not in project.broken:
                yield policy.doc.diag("FC103", f"policy applies to unknown tool '{tool_id}'", ("applies_to", i),
                                      hint=did_you_mean(tool_id, project.contracts))


def check_unused(project: Project):
    """FC104 a state no flow uses, FC105 a contract no state uses (warnings)."""
    used_states: set = set()
    for flow in project.flows.values():
        used_states.update(n for n, _ in flow.named_states())
    frontier = list(used_states)
    while frontier:  # states reached only through a state's own handlers
        state = project.states.get(frontier.pop())
        if state is None:
            continue
        targets = [h.goto for h in state.on_error if h.goto] + [(state.raw.get("on_timeout") or {}).get("goto")]
        for t in targets:
            if t and t not in used_states:
                used_states.add(t)
                frontier.append(t)
    broken_kinds = {kind for kind, _ in project.broken}
    for state in project.states.values():
        if "flow" in broken_kinds:
            break  # a flow file did not load: which states it uses is unknown, so say nothing
        if state.id not in used_states:
            yield state.doc.diag("FC104", f"state '{state.id}' is not used by any flow", ("id",),
                                 hint="remove it, or name it in a flow's transitions")
    used_tools = set()
    for state in project.states.values():
        used_tools.update(versions.split_ref(r)[0] for r, _ in tool_refs(state))
    for tool_id, found in project.contracts.items():
        if tool_id not in used_tools and "state" not in broken_kinds:
            c = found[-1]
            yield c.doc.diag("FC105", f"contract '{tool_id}' is not used by any state", ("id",),
                             hint="remove it, or reference it with tool: " + tool_id + "@^" + c.version.split(".")[0])


def check_order(project: Project):
    """FC301 "*" not in the last handler, FC302 a transition after its state's default, FC303 a shadowed handler,
    FC304 an error name a letter or two from a flowctl error's."""
    lists = []
    for flow in project.flows.values():
        lists.append((flow.doc, flow.on_error))
    for state in project.states.values():
        lists.append((state.doc, state.on_error))
        lists.append((state.doc, state.retry))
    for doc, handlers in lists:
        seen_names: set = set()
        for i, h in enumerate(handlers):
            if "*" in h.errors and i != len(handlers) - 1:
                yield doc.diag("FC301", f'"*" catches every error, so the {len(handlers) - 1 - i} rule(s) after it never run',
                               h.path + ("errors",), hint='move the "*" rule to the end of the list')
            for name in h.errors:
                if name in seen_names and name != "*":
                    yield doc.diag("FC303", f"'{name}' is already matched by an earlier rule; this one never sees it",
                                   h.path + ("errors",))
                close = misspelt_error(name)
                if close:  # (new-user finding: `errors: [ToolUnavailble]` passed, and the retry never applied)
                    yield doc.diag("FC304", f"'{name}' is no flowctl error, so this rule never matches the error "
                                   "meant (a tool's own errors are dotted names, such as Payments.Declined)",
                                   h.path + ("errors",), hint=close)
            seen_names.update(h.errors)
    for flow in project.flows.values():
        default_at: dict = {}
        for t in flow.transitions:
            if t.source in default_at:
                first = default_at[t.source]
                yield flow.doc.diag("FC302", f"transition from '{t.source}' is unreachable: the default at line {first.line()} always matches first",
                                    t.path, hint="move the transition without `when` to the end of its state's transitions")
            elif t.when is None:
                default_at[t.source] = t


#: the run scope's names outside a map's child flow (where ``item`` and ``index`` are always null)
_NOT_PER_ITEM = tuple(n for n in RUN_SCOPE if n not in ("item", "index"))


def _map_child_docs(project: Project) -> set:
    """``id()`` of the documents evaluated per item of a map: the map states, the flows they run and
    those flows' states."""
    maps = [s for s in project.states.values() if s.type == "map"]
    flows = {s.flow for s in maps if getattr(s, "flow", None)}
    out = {id(s.doc) for s in maps}  # item_input maps each item
    for flow_id in flows:
        flow = project.flows.get(flow_id)
        if flow is None:
            continue
        out.add(id(flow.doc))
        for state_id, _ in flow.named_states():
            state = project.states.get(state_id)
            if state is not None:
                out.add(id(state.doc))
    return out


def check_expressions(project: Project):
    """FC401 syntax, FC402 double-quoted literal, FC403 bare backtick literal, FC404 unknown function,
    FC406 a name the expression's scope does not have (always null: a typo)."""
    per_item = _map_child_docs(project)
    for doc, path, text, scope in iter_expressions(project):
        names = SCOPES[scope]
        suggest = names if scope != "run" or id(doc) in per_item else _NOT_PER_ITEM
        for code, offset, message, hint in lint_expression(text, names, suggest):
            style = doc.style(tuple(path))
            line, col = doc.at(tuple(path))
            if style in ('"', "'"):
                col += 1 + offset
            elif style == "" and "\n" not in text:
                col += offset
            yield Diagnostic(code, message, doc.file, line, col, hint)


def check_timing(project: Project):
    """FC501 retry values that cannot work (backoff < 1, max_delay < interval)."""
    for state in project.states.values():
        for r in state.retry:
            if r.backoff < 1:
                yield state.doc.diag("FC501", f"backoff {r.backoff} shrinks the delay", r.path + ("backoff",), hint="use 1.0 (constant) or more")
            if r.max_delay is not None and r.max_delay < r.interval:
                yield state.doc.diag("FC501", "max_delay is shorter than interval", r.path + ("max_delay",),
                                     hint="max_delay caps the growing delay; make it at least the interval")
        if state.type == "wait" and ("duration" in state.raw) == ("until" in state.raw):
            yield state.doc.diag("FC010", "a wait state needs exactly one of duration or until", ("type",))


def check_contracts(project: Project):
    """FC601 side effects without verify/compensate, FC602 read-only contract with compensate, FC604 version/file mismatch."""
    for found in project.contracts.values():
        for c in found:
            if c.side_effecting:
                if not c.verify:
                    # With nothing to undo, a missing verify costs the boundary guard and crash
                    # recovery (an unrecorded call is re-invoked with the same idempotency key), so
                    # it is a warning; with an undo it is an error: we could not tell what to undo.
                    undo_none = c.compensate == "none"
                    yield c.doc.diag("FC601", f"'{c.ref}' declares side effects but no verify", ("side_effects",),
                                     severity="warning" if undo_none else "",
                                     hint="name verify: module:function (input, output, call) -> bool")
                if not c.compensate:
                    yield c.doc.diag("FC601", f"'{c.ref}' declares side effects but no compensate", ("side_effects",),
                                     hint="name compensate: module:function, or say compensate: none with a "
                                          "reason (top-level fields of the contract: `compensate: none` and "
                                          "`reason: mails cannot be unsent`)")
                elif c.compensate == "none" and not c.reason:
                    yield c.doc.diag("FC601", "compensate: none needs a reason", ("compensate",),
                                     hint="say why this effect needs no undo in the contract's top-level `reason` "
                                          "field, next to `compensate: none`, e.g. `reason: mails cannot be unsent`")
            else:
                if c.compensate and c.compensate != "none":
                    yield c.doc.diag("FC602", f"'{c.ref}' declares no side effects but names compensate", ("compensate",),
                                     hint="declare its side_effects, or remove compensate")
                if c.compensate_on_failure:
                    yield c.doc.diag("FC602", "compensate_on_failure needs declared side effects", ("compensate_on_failure",))


def _property_names(schema, found: set) -> bool:
    """Add every property name declared anywhere in ``schema`` to ``found``; True if any was."""
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            found.update(k for k in props if isinstance(k, str))
        for value in schema.values():
            _property_names(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _property_names(value, found)
    return bool(found)


def check_sensitive(project: Project):
    """FC607: a ``sensitive`` name that neither of the contract's schemas declares anywhere (a
    typo leaves the real field in plaintext in the audit log). Silent for contracts whose schemas
    declare no properties at all: there is nothing to compare with."""
    for found in project.contracts.values():
        for c in found:
            names: set = set()
            if not c.sensitive or not (_property_names(c.input_schema, names) | _property_names(c.output_schema, names)):
                continue
            for i, field in enumerate(c.sensitive):
                last = str(field).rsplit(".", 1)[-1]
                if last not in names:
                    close = did_you_mean(last, names)
                    yield c.doc.diag("FC607", f"sensitive field '{field}' is declared by neither input_schema nor "
                                     f"output_schema of '{c.ref}', so nothing is redacted under it",
                                     ("sensitive", i), hint=close or "fields: " + ", ".join(sorted(names)))


def policy_regex_problems(policy, check):
    """FC701 for a policy regex that does not compile, or that RE2 (the gate's engine) cannot run."""
    import re

    try:
        re.compile(check.value)
    except (re.error, TypeError) as exc:
        yield policy.doc.diag("FC701", f"regex {check.value!r} does not compile: {exc}", check.path + ("regex",))
        return
    from flowctl.definition.runtime_schemas import linear_regex, re2_reason  # what the gate runs (flowctl.gate.policy.policy_regex)

    try:
        linear_regex(check.value)
    except Exception as exc:  # noqa: BLE001 - re2.error: look-around, back-references …
        yield policy.doc.diag("FC701", f"regex {check.value!r} needs a backtracking regex engine ({re2_reason(exc)})",
                              check.path + ("regex",),
                              hint="the gate matches policy regexes with RE2, in linear time: look-around and "
                                   "back-references are not available")


def check_policies(project: Project):
    """FC701 policy values that cannot work (a bad regex, a reversed range); FC703 a policy that
    limits nothing and does not say so (no ``allow`` key, rate, dedupe or review_when)."""
    for policy in project.policies.values():
        for check in policy.allow:
            if check.op == "regex":
                yield from policy_regex_problems(policy, check)
            if check.op == "range":
                lo, hi = check.value
                if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
                    yield policy.doc.diag("FC701", f"range [{lo}, {hi}] is empty", check.path + ("range",))
        data = policy.doc.data if isinstance(policy.doc.data, dict) else {}
        limits = policy.rate or policy.dedupe_window or policy.review_when
        if policy.allow and not limits and all(c.effect == "warn" for c in policy.allow):
            yield policy.doc.diag("FC703", f"policy '{policy.name}' only warns: every check says effect: warn and "
                                  f"there is no rate, dedupe or review_when, so it allows every call of "
                                  f"{', '.join(policy.applies_to) or 'its tools'}", ("allow",), severity="warning",
                                  hint="make at least one check hard (drop effect: warn) or review (effect: review)")
        if "allow" not in data and not limits:
            yield policy.doc.diag("FC703", f"policy '{policy.name}' sets no checks, rate, dedupe or review_when: "
                                  f"it allows every call of {', '.join(policy.applies_to) or 'its tools'}",
                                  ("policy",), severity="warning",
                                  hint="add allow checks (field + equals|in|range|regex), a rate, or review_when; "
                                       "or say allow: [] to allow everything on purpose")


_YEAR = 365 * 86400.0


def check_values(project: Project):
    """FC609 embedded JSON Schemas that cannot work; FC010 a handler with two actions; FC502 a
    timeout of 0 or a duration over a year."""
    for doc, path, schema in _embedded_schemas(project):
        for sub, message in schema_problems(schema, path, schema):
            yield doc.diag("FC609", message, sub, hint="see https://json-schema.org/understanding-json-schema/")
    for element in list(project.states.values()) + list(project.flows.values()):
        for h in element.on_error:
            actions = [a for a in ("goto", "fallback", "fail") if getattr(h, a)]
            if len(actions) > 1:
                yield element.doc.diag("FC010", f"a handler takes one action, not {' and '.join(actions)}",
                                       h.path + (actions[1],), key=True, hint="keep goto, fallback or fail")
    for state in project.states.values():
        if isinstance(state.timeout, (int, float)) and state.timeout <= 0:
            yield state.doc.diag("FC502", "timeout must be longer than 0", ("timeout",), hint="e.g. 500ms or 3s")
        for key in ("timeout", "duration", "remind_after"):
            value = state.raw.get(key)
            if isinstance(value, str):
                try:
                    seconds = parse_duration(value)
                except ValueError:
                    continue
                if seconds > _YEAR:
                    yield state.doc.diag("FC502", f"{key} {value} is longer than a year", (key,),
                                         hint="park long waits with until: and a date instead")
        for r in state.retry:
            if r.interval > _YEAR or (r.max_delay or 0) > _YEAR or r.backoff > 1000:
                yield state.doc.diag("FC501", "this retry can wait longer than a year", r.path,
                                     hint="cap it with max_delay")


def _embedded_schemas(project: Project):
    for state in project.states.values():
        if isinstance(state.input_schema, dict):
            yield state.doc, ("input_schema",), state.input_schema
        if isinstance(getattr(state, "data_schema", None), dict):  # a review's decision data
            yield state.doc, ("data_schema",), state.data_schema
    for flow in project.flows.values():
        if isinstance(flow.input_schema, dict):
            yield flow.doc, ("input_schema",), flow.input_schema
    for found in project.contracts.values():
        for c in found:
            for key in ("input_schema", "output_schema"):
                if isinstance(getattr(c, key), dict):
                    yield c.doc, (key,), getattr(c, key)


def check_tool_inputs(project: Project):
    """FC605: a task's input mapping against its contract's input_schema — required fields it never
    sets, and fields the schema forbids (additionalProperties: false)."""
    for state in project.states.values():
        if state.type != "task" or not state.tool or not isinstance(state.input, dict):
            continue
        contract = project.resolve_tool(state.tool)
        schema = contract.input_schema if contract is not None else None
        if not isinstance(schema, dict) or schema.get("type") not in (None, "object"):
            continue
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required")
        for name in required if isinstance(required, list) else ():  # a malformed one is FC609's
            if isinstance(name, str) and name not in state.input:
                close = did_you_mean(name, [k for k in state.input if k not in props])
                yield state.doc.diag("FC605", f"input never sets '{name}', which {contract.ref} requires", ("input",),
                                     key=True, hint=close or f"add {name}: <expression> to input")
        if schema.get("additionalProperties") is False and props:
            for key in state.input:
                if key not in props:
                    yield state.doc.diag("FC605", f"{contract.ref} accepts no input field '{key}'", ("input", key),
                                         key=True, hint=did_you_mean(key, props) or "fields: " + ", ".join(sorted(props)))


def check_fail_states(project: Project):
    """FC405: a fail state's literal error/cause that looks like an expression (they are literals
    unless written as {expr: …})."""
    for state in project.states.values():
        if state.type != "fail":
            continue
        for key in ("error", "cause"):
            value = state.raw.get(key)
            if isinstance(value, str) and len(value) > 1 and value[0] == value[-1] == "'":
                yield state.doc.diag("FC405", f"{key} is a literal here, so the quotes stay in the text", (key,),
                                     hint=f"write {key}: {value[1:-1]}  — or {{expr: {value}}} for an expression")


CHECKS = (check_references, check_unused, check_graph, check_order, check_expressions, check_timing,
          check_contracts, check_policies, check_children, check_values, check_gate, check_tool_inputs, check_fail_states,
          check_same_function, check_helpers_outside_the_gate, check_tool_code, check_tool_names, check_sensitive,
          check_masked_show, check_review_decisions, check_dataflow, check_policy_dataflow, check_model_states)


def validate(project: Project, *, import_entrypoints: bool = False) -> list[Diagnostic]:
    """All diagnostics for ``project``, sorted by file, line, column.

    Loading diagnostics first, then every function in :data:`CHECKS`; with
    ``import_entrypoints`` also :func:`import_check`. Never raises for project content.
    """
    import gc

    out = list(project.diagnostics)
    enabled = gc.isenabled()
    gc.disable()  # as in loading: many small objects, no cycles, and full collections cost O(heap)
    try:
        for check in CHECKS:
            out.extend(check(project))
    finally:
        if enabled:
            gc.enable()
    if import_entrypoints:
        out.extend(import_check(project))
    unique = list(dict.fromkeys(out))
    return sorted(unique, key=sort_key)

