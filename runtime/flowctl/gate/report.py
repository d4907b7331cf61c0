"""Rule health (``flowctl policy report``, issue 21): every rule of every policy with how often it
let a call through, denied it, warned or asked for a review over a window, when it last triggered,
and whether it ever did (a rule that never fires is often broken).

Fed the gate's decisions as recorded: the ``policy_decided`` events of runs
(:func:`flowctl.engine.gatecall.gate`: ``{outcome, policy, rule, reason, warnings?}``) and the
decisions ``flowctl serve`` logged (:func:`flowctl.store.query.service_decisions`). A policy's
rules are named as :meth:`flowctl.gate.policy.Gate.decide` names them: ``allow[i] OP on FIELD``,
``rate``, ``dedupe``, ``review_when``.

Counting, per rule of policy P: ``allow`` — decisions that let the call through with P applying
(every hard check of P held; its ``policy`` lists P); ``deny`` / ``review`` — decisions this rule
made; ``warn`` — allowed decisions whose ``warnings`` name this soft rule. ``evaluated`` — the
decisions P took part in (allowed with P, or denied or sent to review by a rule of P).
``deny_rate`` and ``warn_rate`` are fractions of ``evaluated`` (None when it is 0). A rule
*triggered* when it denied, warned or asked for a review.
"""
from __future__ import annotations


def rule_names(policy) -> list:
    """``[(rule, effect)]`` of one policy, as the gate names its rules, in the gate's order."""
    out = [(f"allow[{i}] {c.op} on {c.field_expr}", c.effect) for i, c in enumerate(policy.allow)]
    if policy.rate:
        out.append(("rate", "deny"))
    if policy.dedupe_window:
        out.append(("dedupe", "deny"))
    if policy.review_when:
        out.append(("review_when", "review"))
    return out


def rule_report(project, decisions) -> dict:
    """``{decisions, no_policy, unknown, rules: [{policy, rule, effect, allow, deny, warn, review,
    evaluated, deny_rate, warn_rate, last_triggered, never_triggered}]}`` over ``decisions``, an
    iterable of ``{ts, outcome, policy, rule, warnings?}`` (epoch seconds). ``no_policy``: decisions
    no policy made (``read-only``, ``default-deny``); ``unknown``: decisions naming a policy or rule
    the project no longer has (renamed or removed since)."""
    rules = {}
    by_policy = {}
    for name in sorted(project.policies):
        by_policy[name] = []
        for rule, effect in rule_names(project.policies[name]):
            rules[(name, rule)] = {"policy": name, "rule": rule, "effect": effect, "allow": 0, "deny": 0,
                                   "warn": 0, "review": 0, "last_triggered": None}
            by_policy[name].append(rules[(name, rule)])
    evaluated = dict.fromkeys(by_policy, 0)
    total = no_policy = unknown = 0

    def hit(key, kind, ts) -> bool:
        found = rules.get(key)
        if found is None:
            return False
        found[kind] += 1
        if found["last_triggered"] is None or ts > found["last_triggered"]:
            found["last_triggered"] = ts
        return True

    for d in decisions:
        total += 1
        outcome, policy, rule, ts = d.get("outcome"), d.get("policy") or "", d.get("rule") or "", d.get("ts") or 0.0
        if not policy:
            no_policy += 1
            continue
        if outcome == "allow":
            names = [n for n in policy.split(", ") if n in by_policy]
            unknown += not names
            for n in names:
                evaluated[n] += 1
                for entry in by_policy[n]:
                    entry["allow"] += 1
            for w in d.get("warnings") or ():
                if isinstance(w, dict) and not hit((w.get("policy"), w.get("rule")), "warn", ts):
                    unknown += 1
        elif outcome in ("deny", "review"):
            if policy in evaluated:
                evaluated[policy] += 1
            if not hit((policy, rule), outcome, ts):
                unknown += 1
    out = []
    for (name, _rule), entry in rules.items():
        n = evaluated[name]
        entry.update(evaluated=n, deny_rate=entry["deny"] / n if n else None, warn_rate=entry["warn"] / n if n else None,
                     never_triggered=entry["deny"] + entry["warn"] + entry["review"] == 0)
        out.append(entry)
    return {"decisions": total, "no_policy": no_policy, "unknown": unknown, "rules": out}


__all__ = ["rule_names", "rule_report"]
