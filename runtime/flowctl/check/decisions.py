"""FC806: a condition compares ``review.decision`` with a decision no review can give.

``review.decision == 'approved'`` where the review offers ``[approve, reject]`` is never true: every
approval takes the other branch, silently. On a transition *from* a review state the decision is
that state's own, so the literal must be one of its ``decisions``; elsewhere it may be any
decision of a review state of the flow, or ``approve``/``reject`` (what a gate-triggered review
offers). Literals only: a decision compared with another expression is not judged.
"""
from __future__ import annotations

from flowctl.check.infer import parse

#: what a gate-triggered review (policy ``review_when``) offers (flowctl.engine.states.task._policy_review)
GATE_DECISIONS = ("approve", "reject")


def _is_decision(node) -> bool:
    return (isinstance(node, dict) and node.get("type") == "subexpression"
            and [c.get("type") for c in node.get("children", ())] == ["field", "field"]
            and [c.get("value") for c in node["children"]] == ["review", "decision"])


def decision_literals(tree) -> list:
    """String literals compared (``==``/``!=``) with ``review.decision`` anywhere in ``tree``."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        kids = node.get("children") or []
        if node.get("type") == "comparator" and node.get("value") in ("eq", "ne") and len(kids) == 2:
            for a, b in (kids, kids[::-1]):
                if _is_decision(a) and isinstance(b, dict) and b.get("type") == "literal" \
                        and isinstance(b.get("value"), str):
                    found.append(b["value"])
        todo.extend(k for k in kids if isinstance(k, dict))
    return found


def check_review_decisions(project):
    """FC806 per transition ``when`` of every flow (see the module docstring)."""
    from flowctl.definition.kinds import did_you_mean

    for flow in project.flows.values():
        reviews = {}  # every review state of the flow has transitions out of it, so it is a source
        for sid in sorted({t.source for t in flow.transitions}):
            state = project.states.get(sid)
            if state is not None and state.type == "review":
                decisions = state.get("decisions")
                reviews[sid] = [d for d in decisions if isinstance(d, str)] if isinstance(decisions, list) else []
        anywhere = sorted({d for ds in reviews.values() for d in ds} | set(GATE_DECISIONS))
        for t in flow.transitions:
            if not isinstance(t.when, str):
                continue
            tree = parse(t.when)
            if tree is None:
                continue
            offered = reviews.get(t.source, anywhere)
            for literal in decision_literals(tree):
                if literal in offered:
                    continue
                whose = f"'{t.source}' offers" if t.source in reviews else "no review of this flow offers it; they offer"
                yield flow.doc.diag("FC806", f"review.decision is compared with '{literal}', a decision {whose} "
                                    f"{', '.join(offered) or 'none'}: the condition can never hold as meant",
                                    t.path + ("when",),
                                    hint=did_you_mean(literal, offered) or "compare with one of the listed decisions")
