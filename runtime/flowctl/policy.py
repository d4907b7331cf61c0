"""The policy gate: default deny in front of side-effecting tools, every decision explained.

:meth:`Gate.decide` answers ``allow``, ``deny`` or ``review`` for one tool call, with the policy
and rule that decided and why (a :class:`Decision`). Rules, in order:

1. A read-only tool (no ``side_effects`` in its contract) is allowed: ``rule="read-only"``.
2. A side-effecting tool that no policy ``applies_to`` is denied: ``rule="default-deny"``.
3. Each applying policy, in file-name order: every ``allow`` check must hold (``equals``, ``in``,
   ``range`` [lo, hi] inclusive with ``null`` as open, ``regex`` full match) on the JMESPath
   ``field`` evaluated on ``{input, run, flow, tool}``; then ``rate`` (at most ``max`` allowed
   calls per ``window`` seconds, counted per ``flow``, ``run`` or ``tool`` in the store, so it holds
   across processes); then ``dedupe`` (the same run, tool and input digest inside the window is
   refused). The first failing rule denies.
4. If all hold and some policy's ``review_when`` is true, the answer is ``review``: the run pauses
   for a human before the tool is invoked.

Allowed calls are recorded in the store (``gate_log``) for rate and dedupe.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from .audit import canonical
from .expressions import compile_expr


@dataclass(frozen=True)
class Decision:
    """``outcome``: allow | deny | review. ``policy``/``rule`` name what decided; ``reason`` says why."""

    outcome: str
    policy: str = ""
    rule: str = ""
    reason: str = ""
    checks: tuple = field(default=())

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "policy": self.policy, "rule": self.rule, "reason": self.reason}


def input_digest(tool_input) -> str:
    return hashlib.sha256(canonical(tool_input).encode()).hexdigest()


class Gate:
    def __init__(self, project, store, clock):
        self.project = project
        self.store = store
        self.clock = clock
        self._by_tool: dict = {}
        for name in sorted(project.policies):
            p = project.policies[name]
            for tool in p.applies_to:
                self._by_tool.setdefault(tool, []).append(p)

    def decide(self, contract, tool_input, *, run_id: str = "", flow: str = "", record: bool = True,
               retry: bool = False) -> Decision:
        """The gate's answer for one call. ``retry``: a retry of a call the gate already allowed in
        this step — the checks still apply, but it is not a new call for ``rate`` and ``dedupe``."""
        if not contract.side_effecting:
            return Decision("allow", rule="read-only", reason=f"{contract.id} declares no side effects")
        policies = self._by_tool.get(contract.id, [])
        if not policies:
            return Decision("deny", rule="default-deny",
                            reason=f"no policy applies to side-effecting tool '{contract.id}'")
        scope = {"input": tool_input, "run": {"id": run_id, "flow": flow}, "flow": flow, "tool": contract.id}
        now = self.clock.time()
        digest = input_digest(tool_input)
        review = None
        for p in policies:
            for i, check in enumerate(p.allow):
                ok, why = _check(check, scope)
                if not ok:
                    return Decision("deny", p.name, f"allow[{i}] {check.op} on {check.field_expr}", why)
            if p.rate and not retry:
                column, value = {"flow": ("flow", flow), "run": ("run_id", run_id), "tool": ("tool", contract.id)}[p.rate["per"]]
                used = self.store.gate_count(column, value, contract.id, now - p.rate["window"])
                if used >= p.rate["max"]:
                    return Decision("deny", p.name, "rate",
                                    f"{used} calls of {contract.id} in the last {p.rate['window']:g}s per {p.rate['per']} "
                                    f"(max {p.rate['max']})")
            if p.dedupe_window and not retry and self.store.gate_seen(run_id, contract.id, digest, now - p.dedupe_window):
                return Decision("deny", p.name, "dedupe",
                                f"the same input was sent to {contract.id} by this run within {p.dedupe_window:g}s")
            if p.review_when and review is None:
                value = compile_expr(p.review_when, p.where("review_when")).evaluate(scope)
                if _truthy(value):
                    review = Decision("review", p.name, "review_when", f"{p.review_when} is true")
        if review is not None:
            return review
        if record and not retry:
            self.record(contract.id, flow, run_id, digest)
        names = ", ".join(p.name for p in policies)
        return Decision("allow", names, "allow", f"every check of {names} holds")

    def record(self, tool: str, flow: str, run_id: str, digest: str) -> None:
        self.store.gate_record({"at": self.clock.time(), "tool": tool, "flow": flow, "run_id": run_id, "digest": digest})


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


def _truthy(value) -> bool:
    """JMESPath truthiness: false, null, empty string/list/object are false; numbers are true."""
    return not (value is None or value is False or value in ("", [], {}))


def _check(check, scope):
    value = compile_expr(check.field_expr, check.where("field")).evaluate(scope)
    op, want = check.op, check.value
    shown = _json(value)
    if op == "equals":
        return _same(value, want), f"{check.field_expr} is {shown}, not {_json(want)}"
    if op == "in":
        return any(_same(value, w) for w in want), f"{check.field_expr} is {shown}, not one of {_json(want)}"
    if op == "range":
        lo, hi = want
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (lo is None or value >= lo) and (hi is None or value <= hi)
        return ok, f"{check.field_expr} is {shown}, outside [{_json(lo)}, {_json(hi)}]"
    if op == "regex":
        ok = isinstance(value, str) and re.fullmatch(want, value) is not None
        return ok, f"{check.field_expr} is {shown}, which does not match /{want}/"
    return False, f"unknown check {op}"
