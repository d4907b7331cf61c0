"""The policy gate: default deny in front of side-effecting tools, every decision explained.

:meth:`Gate.decide` answers ``allow``, ``deny`` or ``review`` for one tool call, with the policy
and rule that decided and why (a :class:`Decision`). Rules, in order:

1. A read-only tool (no ``side_effects`` in its contract) is allowed: ``rule="read-only"``.
2. A side-effecting tool that no policy ``applies_to`` is denied: ``rule="default-deny"``.
3. Each applying policy, in file-name order: every ``allow`` check must hold (``equals``, ``in``,
   ``all_in`` (every element of a list is one of), ``range`` [lo, hi] inclusive with ``null`` as
   open, ``regex`` matching the *whole* value) on the JMESPath ``field`` evaluated on ``{input (the
   tool input), run, flow, tool, run_input, params, context}`` (``regex`` runs in RE2); an operand may be ``{expr: …}`` on
   the same scope (``range: [0, {expr: context.order_total}]``), and one that does not evaluate to
   what the check needs (a null bound, a list that is not a list, an ``equals`` operand that is
   null) denies; then ``rate`` (at most ``max`` allowed calls of the *function* per ``window``
   seconds, counted per ``flow``, ``run`` or ``tool`` in the store); then ``dedupe`` (the same run,
   function and input digest inside the window is refused). Rate and dedupe are counted and the
   call recorded in one atomic step (:mod:`flowctl.store.counters`), so they hold across processes.
   The first failing rule denies.
4. If all hold and some policy's ``review_when`` is true, the answer is ``review``: the run pauses
   for a human before the tool is invoked.

A check's ``effect`` says what its failure does: ``deny`` (a hard rule, the default, as in 3),
``warn`` (a soft rule: the call goes on, and the decision lists the warning in ``warnings`` —
recorded with the ``policy_decided`` event) or ``review`` (as ``review_when``: a human decides
before the call; the rule is ``allow[i] …``, and an approval of this very call lets it pass).

The gate follows the function: a contract's policies are its own plus those of every contract with
the same ``entrypoint``, and a function declared side-effecting by any contract is gated under all
of them. Allowed calls are recorded in the store (``gate_log``) for rate and dedupe.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from flowctl.definition.toolpath import function_key
from flowctl.store.audit import canonical
from flowctl.expr.compile import truthy
from flowctl.expr.expressions import compile_expr


@dataclass(frozen=True)
class Decision:
    """``outcome``: allow | deny | review. ``policy``/``rule`` name what decided; ``reason`` says why."""

    outcome: str
    policy: str = ""
    rule: str = ""
    reason: str = ""
    checks: tuple = field(default=())
    #: soft rules (``effect: warn``) that failed: ``({"policy", "rule", "reason"}, …)``
    warnings: tuple = field(default=())

    def as_dict(self) -> dict:
        out = {"outcome": self.outcome, "policy": self.policy, "rule": self.rule, "reason": self.reason}
        if self.warnings:  # absent when none: a decision without soft rules is recorded as before
            out["warnings"] = [dict(w) for w in self.warnings]
        return out


def input_digest(tool_input) -> str:
    return hashlib.sha256(canonical(tool_input).encode()).hexdigest()


#: How long a gate-triggered review (``review_when``) waits for a decision when the policy does not
#: say (``review_timeout``), in seconds; then the call is denied (default deny).
DEFAULT_REVIEW_TIMEOUT = 24 * 3600.0


class Gate:
    """The gate of one project. It follows the *function*: the policies of every contract whose
    ``entrypoint`` is the same apply to each of them, and a function any contract declares
    side-effecting is gated under every contract that names it (validate reports FC704 where such
    contracts disagree)."""

    def __init__(self, project, store, clock):
        self.project = project
        self.store = store
        self.clock = clock
        found = project._resolved.get(("gate", "by-function"))
        if found is None:  # built once per project: a runner makes a Gate per run
            found = project._resolved[("gate", "by-function")] = _by_function(project)
        self._by_tool, self._shared, self._gated, self._effect_ids, self._ids_by_entry = found

    def guards(self, contract, also=()) -> bool:
        """Whether calls of ``contract`` go through the checks: it, or another contract on the same
        function (the same ``entrypoint``, or one of ``also``: ids whose entrypoint resolved to the
        same object, see :func:`function_aliases`), declares side effects — or a policy applies to
        one of them. (A policy names the tools it governs: taking ``side_effects`` out of a contract
        must not switch its policy off; new-user finding.)"""
        return (contract.side_effecting or contract.entrypoint in self._gated
                or any(i in self._effect_ids for i in also)
                or contract.id in self._by_tool or bool(self._shared.get(contract.entrypoint))
                or any(i in self._by_tool for i in also))

    def _policies(self, contract, also) -> list:
        found = self._shared.get(contract.entrypoint) or self._by_tool.get(contract.id, ())
        if also:
            merged = {p.name: p for p in found}
            for tool in also:
                merged.update((p.name, p) for p in self._by_tool.get(tool, ()))
            found = [merged[name] for name in sorted(merged)]
        return found

    def decide(self, contract, tool_input, *, run_id: str = "", flow: str = "", record: bool = True,
               retry: bool = False, digest: str | None = None, run_input=None, params=None,
               context=None, also=(), approved=None) -> Decision:
        """The gate's answer for one call.

        ``retry``: the caller knows this repeats the very call the gate allowed earlier in the same
        step (same tool, same input: a technical retry) — the checks still apply, but it is not a
        new call for ``rate`` and ``dedupe``. A retry after a denied call is a new call.
        ``run_input``/``params``/``context``: the run the call belongs to, visible to ``allow``
        checks and ``review_when`` as ``run_input``, ``params`` and ``context``. ``digest``: the
        input's :func:`input_digest` when the caller has it. ``also``: ids of other contracts whose
        entrypoint resolved to the very function this call runs (their policies apply too).
        ``approved``: ``(policy, rule)`` pairs of the gate reviews a reviewer approved for this very
        call (same tool and input): those no longer hold the call back, another policy's
        ``review_when`` still does, and every other check still applies.
        ``rate`` and ``dedupe`` count the calls of every contract of the function
        (:meth:`function_ids`), and are counted and recorded in one atomic step in the store."""
        if not self.guards(contract, also):
            return Decision("allow", rule="read-only", reason=f"{contract.id} declares no side effects")
        policies = self._policies(contract, also)
        if not policies:
            why = f"no policy applies to side-effecting tool '{contract.id}'"
            if not contract.side_effecting:
                why = (f"'{contract.id}' declares no side effects, but its function {contract.entrypoint} has them "
                       f"under another contract ({', '.join(also) or 'the same entrypoint'}), and no policy applies")
            return Decision("deny", rule="default-deny", reason=why)
        scope = {"input": tool_input, "run": {"id": run_id, "flow": flow}, "flow": flow, "tool": contract.id,
                 "run_input": run_input, "params": params if params is not None else {},
                 "context": context if context is not None else {}}
        now = self.clock.time()
        if digest is None:
            digest = input_digest(tool_input)
        review = denied = None
        approved, passed, warnings = {tuple(a) for a in approved or ()}, [], []
        limits, owners = [], []  # the store's checks (rate, dedupe), in rule order, and their policies
        for p in policies:
            for i, check in enumerate(p.allow):
                ok, why = _check(check, scope)
                if ok:
                    continue
                rule = f"allow[{i}] {check.op} on {check.field_expr}"
                if check.effect == "warn":
                    warnings.append({"policy": p.name, "rule": rule, "reason": why})
                elif check.effect != "review":
                    denied = Decision("deny", p.name, rule, why)
                    break
                elif (p.name, rule) in approved:  # a reviewer approved this very call for this check
                    passed.append((p.name, rule))
                elif review is None:
                    review = Decision("review", p.name, rule, why)
            if denied is not None:
                break
            if p.rate and not retry:
                column, value = {"flow": ("flow", flow), "run": ("run_id", run_id), "tool": (None, "")}[p.rate["per"]]
                limits.append({"kind": "rate", "since": now - p.rate["window"], "max": p.rate["max"],
                               "column": column, "value": value})
                owners.append(p)
            if p.dedupe_window and not retry:
                limits.append({"kind": "dedupe", "since": now - p.dedupe_window, "run_id": run_id, "digest": digest})
                owners.append(p)
            if p.review_when and review is None:
                value = compile_expr(p.review_when, p.where("review_when")).evaluate(scope)
                if not truthy(value):
                    pass
                elif (p.name, "review_when") in approved:  # a reviewer approved this very call for p
                    passed.append((p.name, "review_when"))
                else:
                    review = Decision("review", p.name, "review_when", f"{p.review_when} is true")
        write = record and not retry and denied is None and review is None
        entry = {"at": now, "tool": contract.id, "flow": flow, "run_id": run_id, "digest": digest} if write else None
        if limits:  # counted and recorded in one atomic step, over every contract of the function
            failed = self.store.gate_admit(self.function_ids(contract, also), limits, entry)
            if failed is not None:
                i, used = failed
                p, limit = owners[i], limits[i]
                if limit["kind"] == "rate":
                    return Decision("deny", p.name, "rate",
                                    f"{used} calls of {self._function_name(contract, also)} in the last "
                                    f"{p.rate['window']:g}s per {p.rate['per']} (max {p.rate['max']})")
                by = "this session" if str(run_id or "").startswith("gate:") else "this run"  # gatecheck.gate_run_id
                return Decision("deny", p.name, "dedupe", f"the same input was sent to "
                                f"{self._function_name(contract, also)} by {by} within {p.dedupe_window:g}s")
        elif entry is not None:
            self.store.gate_record(entry)
        if denied is not None:
            return denied
        if review is not None:
            return review
        names = ", ".join(p.name for p in policies)
        warned = tuple(warnings)
        soft = f"; {len(warned)} soft rule(s) warned" if warned else ""
        every = "every hard check" if warned else "every check"
        if passed:
            if all(rule == "review_when" for _, rule in passed):
                shown = f"{', '.join(name for name, _ in passed)}: review_when"
            else:
                shown = ", ".join(f"{name}: {rule}" for name, rule in passed)
            return Decision("allow", names, "review", f"{every} of {names} holds{soft}; approved in review "
                                                      f"({shown})", warnings=warned)
        return Decision("allow", names, "allow", f"{every} of {names} holds{soft}", warnings=warned)

    def function_ids(self, contract, also=()) -> list:
        """The contract ids of the function ``contract`` runs (same entrypoint, or an alias in
        ``also``): ``rate`` and ``dedupe`` count the calls of all of them together."""
        return sorted({contract.id, *also, *self._ids_by_entry.get(contract.entrypoint, ())})

    def _function_name(self, contract, also) -> str:
        ids = self.function_ids(contract, also)
        return contract.id if len(ids) == 1 else f"{contract.entrypoint} ({', '.join(ids)})"

    def review_timeout(self, policy_name: str) -> float:
        """Seconds a gate-triggered review by ``policy_name`` waits (``review_timeout``, default 24h)."""
        p = self.project.policies.get(policy_name)
        return (p.review_timeout if p is not None and p.review_timeout else None) or DEFAULT_REVIEW_TIMEOUT

    def record(self, tool: str, flow: str, run_id: str, digest: str) -> None:
        self.store.gate_record({"at": self.clock.time(), "tool": tool, "flow": flow, "run_id": run_id, "digest": digest})


def _by_function(project):
    """``({contract id: policies}, {entrypoint: policies}, gated entrypoints)``: an entrypoint named
    by several contract ids gets the policies of all of them, whichever id a state names."""
    by_tool: dict = {}
    for name in sorted(project.policies):
        p = project.policies[name]
        for tool in p.applies_to:
            by_tool.setdefault(tool, []).append(p)
    ids_by_entry: dict = {}
    gated = set()
    effect_ids = set()
    for versions_ in project.contracts.values():
        for c in versions_:
            ids_by_entry.setdefault(c.entrypoint, set()).add(c.id)
            if c.side_effecting:
                gated.add(c.entrypoint)
                effect_ids.add(c.id)
    shared: dict = {}
    for entry, ids in ids_by_entry.items():
        if len(ids) > 1:
            found = {p.name: p for tool in sorted(ids) for p in by_tool.get(tool, ())}
            shared[entry] = [found[name] for name in sorted(found)]
    return by_tool, shared, frozenset(gated), frozenset(effect_ids), ids_by_entry


def function_aliases(engine, project, fn, tools_folder: str) -> tuple:
    """Ids of the side-effecting or policy-governed contracts of ``project`` whose entrypoint
    resolves (through ``engine``, so mocks count as themselves) to the very object ``fn`` — the
    same function under another name, e.g. a module re-exporting another's function. Each such
    entrypoint is resolved once per engine and definition; one that cannot be resolved is skipped
    (it cannot be what runs)."""
    tables = engine.__dict__.setdefault("_gate_functions", {})
    table = tables.get(project.digest())
    if table is None:
        governed = {tool for p in project.policies.values() for tool in p.applies_to}
        table = {}
        for versions_ in project.contracts.values():
            for c in versions_:
                if not (c.side_effecting or c.id in governed):
                    continue
                try:
                    found = engine.tool_function(c, "entrypoint", tools_folder)
                except Exception:  # noqa: BLE001 - unimportable or refused: it is not this function
                    continue
                table.setdefault(function_key(found), (found, set()))[1].add(c.id)
        tables[project.digest()] = table
    hit = table.get(function_key(fn))  # the kept object keeps the key's ids from being reused
    return tuple(sorted(hit[1])) if hit is not None else ()


def context_keys_read(project) -> dict:
    """``{top-level context key: [policy names]}`` the gate reads — in a check's ``field``, an
    ``{expr: …}`` operand or ``review_when``; the key ``"*"`` when an expression reads the context
    as a whole (``context`` not followed by ``.name``). What an operator may not edit in a run:
    a value the gate trusts must come from the run, not from the person overriding it."""
    import re

    found: dict = {}
    ref = re.compile(r"\bcontext\b(\.([A-Za-z_][A-Za-z0-9_]*))?")

    def scan(text, name):
        if isinstance(text, str):
            for m in ref.finditer(text):
                found.setdefault(m.group(2) or "*", set()).add(name)

    for name, p in project.policies.items():
        scan(p.review_when, name)
        for check in p.allow:
            scan(check.field_expr, name)
            values = check.value if isinstance(check.value, list) else [check.value]
            for v in values:
                if isinstance(v, dict):
                    scan(v.get("expr"), name)
    return {k: sorted(v) for k, v in found.items()}


def _same(a, b) -> bool:
    """JSON equality: ``true`` is not ``1`` and ``false`` is not ``0`` (Python's ``==`` says they are)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _json(value) -> str:
    """A value as the flow author wrote it (JSON: null, true, "text"), not as Python prints it."""
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


def _operand(value, scope, check):
    """``(value, computed)`` of a check's operand: a literal, or ``{expr: JMESPath}`` evaluated on
    the same scope (the run's input, params, context); :func:`_label` says how it reads."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("expr"), str):
        return compile_expr(value["expr"], check.where("field")).evaluate(scope), True
    return value, False


def _label(raw, value, computed) -> str:
    """How an operand reads in a reason: ``expr = value`` when computed, else the literal as JSON."""
    return f"{raw['expr']} = {_json(value)}" if computed else _json(value)


#: id(check) -> (check, its compiled field expression): compiled once, not looked up per call
_FIELDS: dict = {}


def _field(check):
    found = _FIELDS.get(id(check))
    if found is None or found[0] is not check:
        found = _FIELDS[id(check)] = (check, compile_expr(check.field_expr, check.where("field")))
    return found[1]


def policy_regex(pattern: str):
    """A policy ``regex`` compiled by RE2 (linear time in the value's length: a pattern cannot stall
    the gate); match with ``.fullmatch`` (the whole value). Raises ``re2.error`` for a pattern RE2
    cannot run (it does not compile, or needs look-around or back-references)."""
    from flowctl.definition.runtime_schemas import linear_regex

    return linear_regex(pattern)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check(check, scope):
    """``(holds, why not)`` of one ``allow`` check on ``scope``; the reason is written only when the
    check fails (``""`` when it holds)."""
    value = _field(check).evaluate(scope)
    op, raw = check.op, check.value
    if op == "equals":
        want, computed = _operand(raw, scope, check)
        if computed and want is None:  # null is not "anything": a missing field would equal it
            return False, f"{_label(raw, want, computed)}, so {check.field_expr} cannot be checked against it (denied)"
        if _same(value, want):
            return True, ""
        return False, f"{check.field_expr} is {_json(value)}, not {_label(raw, want, computed)}"
    if op in ("in", "all_in"):
        want, computed = _operand(raw, scope, check)
        if not isinstance(want, list):
            return False, f"{_label(raw, want, computed)} is not a list, so nothing is in it (denied)"
        if op == "in":
            if any(_same(value, w) for w in want):
                return True, ""
            return False, f"{check.field_expr} is {_json(value)}, not one of {_label(raw, want, computed)}"
        if not isinstance(value, list):
            return False, f"{check.field_expr} is {_json(value)}, not a list"
        outside = [v for v in value if not any(_same(v, w) for w in want)]
        return not outside, f"{check.field_expr} has {_json(outside)}, not in {_label(raw, want, computed)}" if outside else ""
    if op == "range":
        (lo, lo_expr), (hi, hi_expr) = (_operand(b, scope, check) for b in raw)
        for b, bound, computed in ((raw[0], lo, lo_expr), (raw[1], hi, hi_expr)):
            if computed and not _number(bound):  # an expression bound must be a number: null is not "open"
                return False, (f"{_label(b, bound, computed)} is not a number, so {check.field_expr} cannot be "
                               "checked against it (denied)")
        if _number(value) and (lo is None or value >= lo) and (hi is None or value <= hi):
            return True, ""
        return False, (f"{check.field_expr} is {_json(value)}, outside [{_label(raw[0], lo, lo_expr)}, "
                       f"{_label(raw[1], hi, hi_expr)}]")
    if op == "regex":
        try:
            pattern = policy_regex(raw)
        except Exception as exc:  # noqa: BLE001 - re2.error: it does not compile, or needs backtracking
            from flowctl.definition.runtime_schemas import re2_reason

            return False, f"regex /{raw}/ cannot be run ({re2_reason(exc)}), so nothing matches it (denied)"
        if isinstance(value, str) and pattern.fullmatch(value) is not None:
            return True, ""
        return False, (f"{check.field_expr} is {_json(value)}, which does not match /{raw}/ as a whole "
                       "(regex matches the whole value)")
    return False, f"unknown check {op}"
