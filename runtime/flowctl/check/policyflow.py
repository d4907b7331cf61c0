"""FC801 and FC802 for the expressions of policies: what a rule reads of a call's ``input``.

A policy's ``allow`` checks (``field``, and an operand's ``{expr: …}``) and its ``review_when`` read
the call they gate. Their ``input`` is the input of a tool the policy ``applies_to``, so its shape
is what those contracts' ``input_schema`` allow (joined over every version of every such tool:
a field any of them has is a field). The same inference as a flow's expressions
(:mod:`flowctl.check.infer`) then says what cannot work: a path into a field no such schema has
(FC801: ``review_when: "input.plna == 'team'"`` never holds, so the review it asks for never
happens; ``field: input.plna`` is null, so every call is denied), and a comparison of known,
different JSON types (FC802: ``input.amount > '100'`` fails at run time). The other names a
policy may read (``run``, ``flow``, ``tool``, ``run_input``, ``params``, ``context``) are not known
here: nothing is said about them. (New-user finding: a misspelt ``review_when`` passed
``validate --strict`` and silently skipped the human review.)
"""
from __future__ import annotations

from flowctl.check import shapes as S
from flowctl.check.facts import with_roots
from flowctl.check.infer import Inference, Site, parse


class _NoFlow:
    """What the inference asks of a flow's analysis, for an expression outside any flow: no
    state precedes it and no condition of it reads ``context`` it could warn about."""

    class data:  # noqa: N801 - the attribute the inference reads (``a.data.entry``)
        entry: dict = {}

    @staticmethod
    def may_precede(name, state) -> bool:
        return True

    @staticmethod
    def sometimes(site, label) -> None:
        return None


def _expressions(policy):
    """``(path, text)`` of each expression of ``policy`` (as :func:`flowctl.check.checks.iter_expressions`)."""
    for check in policy.allow:
        yield check.path + ("field",), check.field_expr
        operands = check.value if check.op == "range" and isinstance(check.value, list) else [check.value]
        for i, operand in enumerate(operands):
            if isinstance(operand, dict) and isinstance(operand.get("expr"), str):
                yield check.path + ((check.op, i, "expr") if check.op == "range" else (check.op, "expr")), operand["expr"]
    if policy.review_when:
        yield ("review_when",), policy.review_when


def check_policy_dataflow(project):
    """FC801/FC802 for the expressions of every policy of ``project`` (the ``validate`` check)."""
    for policy in project.policies.values():
        contracts = [c for tool in policy.applies_to if isinstance(tool, str) for c in project.contracts.get(tool, ())]
        if not contracts:
            continue  # FC103 says the tool is unknown
        given = S.join_all(S.from_schema(c.input_schema) if isinstance(c.input_schema, dict) else S.ANY
                           for c in contracts)
        scope = with_roots(S.obj({}, closed=False), input=given)
        for path, text in _expressions(policy):
            tree = parse(text) if isinstance(text, str) else None
            if tree is None or tree.get("type") in ("literal", "field"):
                continue  # a syntax error is FC401's; a bare name FC406's
            site = Site(policy.doc, path, text, None, False, None)
            try:
                Inference(_NoFlow, site).run(tree, scope)
            except Exception:  # noqa: BLE001 - the analysis must not make validate crash: silent where unsure
                continue
            yield from site.found.values()


__all__ = ["check_policy_dataflow"]
