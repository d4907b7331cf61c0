"""The policy gate for one tool call, and the review it may ask for (a policy's ``review_when``).

:func:`gate` returns None (allowed), :data:`~flowctl.engine.context.PARKED` (the run paused for a
gate review) or raises :class:`~flowctl.errors.PolicyDenied`.
"""
from __future__ import annotations

from flowctl.engine import spans
from flowctl.engine.clock import iso
from flowctl.engine.tokens import new_token
from flowctl.errors import PolicyDenied
from flowctl.gate.policy import function_aliases, input_digest
from flowctl.store.audit import canonical, redact


def gate(ctx, state, contract, attempt, tool_input, fn, *, purpose=None, fallback=False):
    """The policy gate for one call: None (go on), ``PARKED`` (paused for a gate-triggered review),
    or raises PolicyDenied.

    The gate follows the function (:meth:`Gate.guards`), by entrypoint and by the resolved object
    ``fn`` (:func:`function_aliases`): a read-only contract on a function another contract declares
    side-effecting is gated too, and every policy of every contract on it applies. Only a repeat of the call the gate allowed in this
    step (same tool, same input digest: a technical retry) is exempt from ``rate`` and ``dedupe``;
    a retry after a *denied* call, with another input, or a fallback is a new call and counted as one.
    A gate review's approval covers only the call it showed (:func:`_approved`), once: the same call
    made again later in the step (an agent asking for it twice) is reviewed again."""
    also, checked = guarded(ctx, contract, fn)
    if not checked:  # read-only everywhere: allowed without a word (policy.py rule 1)
        return
    c = ctx.cursor
    digest = call_digest(ctx.secrets, tool_input)
    granted = [c.step, contract.id, digest] + (["fallback"] if fallback else [])  # a fallback is a new call
    repeat = c.gate_granted == granted
    approved = _approved(ctx, state, contract, digest)
    if approved and (c.review or {}).get("used") and not repeat:
        approved = []  # used up by the call it showed: the same call again (an agent's next one) asks again
    decision = ctx.gate.decide(contract, tool_input, run_id=ctx.id, flow=ctx.flow.id, retry=repeat, digest=digest,
                                  run_input=ctx.row["input"], params=ctx.row.get("params") or {},
                                  context=c.context, also=also, approved=approved)
    ctx.emit("policy_decided", state.id, attempt, tool=contract.ref, **decision.as_dict())
    if ctx.span is not None:
        spans.gate(ctx, contract, decision)
    if decision.outcome == "deny":
        raise PolicyDenied(f"{contract.id} denied by {decision.policy or 'the gate'} ({decision.rule}): {decision.reason}")
    if decision.outcome == "review":
        if purpose is not None:  # a review's notify (or reminder) cannot pause for another review: no
            raise PolicyDenied(f"{contract.id} denied by {decision.policy} ({decision.rule}): {decision.reason}; "
                               "a review's notify tool cannot wait for a gate review")
        return _policy_review(ctx, state, contract, decision, tool_input, digest)
    c.gate_granted = granted
    if approved and decision.rule == "review" and not (c.review or {}).get("used"):
        c.review = dict(c.review, used=True)  # one approval, one call (its technical retries aside)
    return None


def guarded(ctx, contract, fn) -> tuple:
    """``(also, guarded)``: the other contracts on ``fn`` (:func:`function_aliases`) and whether the
    gate checks this call (:meth:`Gate.guards`). Both depend only on the definition and the
    resolved function, so they are worked out once per engine, definition and contract (``ctx.guards``)."""
    key = (contract.id, contract.entrypoint, contract.side_effecting)
    found = ctx.guards.get(key)
    if found is None or found[0] is not fn:  # the function kept: its id cannot be reused meanwhile
        also = tuple(i for i in function_aliases(ctx.engine, ctx.project, fn, ctx.tools_folder) if i != contract.id)
        found = ctx.guards[key] = (fn, also, ctx.gate.guards(contract, also))
    return found[1], found[2]


def call_digest(secrets, tool_input) -> str:
    """The digest of a call's input the gate counts (dedupe), a review shows and the run records.
    In a sensitive run (``secrets``: its :class:`~flowctl.engine.sensitive.Secrets`), keyed by
    the store's key: a plain SHA-256 of an input holding a CVV or a PIN gives it away to anyone
    who reads the events and tries the 1,000 (or 10,000) values; otherwise
    :func:`~flowctl.gate.policy.input_digest`."""
    keyring = getattr(secrets, "keyring", None)
    if keyring is None:
        return input_digest(tool_input)
    return keyring.digest("gate-input:" + canonical(tool_input)).partition(":")[2]  # 64 hex digits, as the gate table keeps


def _call_shown(contract, digest, policy, rule) -> dict:
    """What a gate review is about: one call (contract, input digest) held back by one policy rule."""
    return {"tool": contract.ref, "digest": digest, "policy": policy, "rule": rule}


def _same_call(shown, call) -> bool:
    """Whether a review was about ``call`` (contract, input digest, policy and rule)."""
    return isinstance(shown, dict) and all(shown.get(k) == call[k] for k in ("tool", "digest", "policy", "rule"))


def _approved(ctx, state, contract, digest) -> list:
    """``[(policy, rule)]`` of the gate reviews a reviewer approved for exactly this call (same state
    and step, same contract, same input digest), else empty: an approval never carries over to a
    fallback tool, a retry with another input, or another policy's review."""
    review = ctx.cursor.review or {}
    call = review.get("call") or {}
    if (review.get("policy") and review.get("decision") == "approve" and review.get("state") == state.id
            and review.get("step") == ctx.cursor.step and call.get("tool") == contract.ref
            and call.get("digest") == digest):
        return [(call.get("policy"), call.get("rule"))] + [tuple(a) for a in call.get("approved") or ()]
    return []


def _policy_review(ctx, state, contract, decision, tool_input, digest):
    """``review_when`` held: pause before the tool (an implicit review) unless this very call was
    rejected (denied), or its review timed out (denied). An approved call never gets here (the gate
    allows it, :func:`_approved`); any other call is shown to a reviewer as a new one.

    The reviewer is shown the tool, the tool input (redacted per the contract's ``sensitive``), the
    policy, the rule and why it fired. The review has a deadline (the policy's ``review_timeout``,
    default 24 h): undecided by then, the call is denied (``PolicyDenied``, rule review_timeout)."""
    c = ctx.cursor
    review = c.review or {}
    call = dict(_call_shown(contract, digest, decision.policy, decision.rule),
                approved=[list(a) for a in _approved(ctx, state, contract, digest)])  # this call's other reviews
    if review.get("policy") and review.get("state") == state.id and review.get("step") == c.step \
            and _same_call(review.get("call"), call) and review.get("decision") != "approve":
        raise PolicyDenied(f"{contract.id} was rejected in review ({decision.policy}: {decision.reason})")
    pending = c.pending or {}
    if pending.get("policy") and pending.get("state") == state.id and pending.get("step") == c.step \
            and (pending.get("call") is None or _same_call(pending.get("call"), call)) \
            and not pending.get("decided") and ctx.review_expired():  # (no call: asked before calls were recorded)
        c.pending = None
        ctx.emit("review_timed_out", state.id, c.attempt, policy=decision.policy, rule="review_timeout")
        raise PolicyDenied(f"{contract.id} denied by {decision.policy} (review_timeout): the review was not decided by "
                     f"{iso(pending['deadline'])} (default deny)")
    token, token_hash = new_token()
    ctx.issued_token = token
    policy = ctx.project.policies.get(decision.policy)
    deadline = ctx.clock.time() + ctx.gate.review_timeout(decision.policy)
    show = {"tool": contract.ref, "input": redact(tool_input, contract.sensitive), "policy": decision.policy,
            "rule": decision.rule,
            "when": policy.review_when if policy is not None and decision.rule == "review_when" else None,
            "reason": decision.reason}
    pending = {"kind": "review", "state": state.id, "token_hash": token_hash, "decisions": ["approve", "reject"],
               "show": show, "deadline": deadline, "policy": True, "step": c.step, "call": call}
    ctx.emit("review_requested", state.id, show=show, decisions=pending["decisions"], policy=decision.policy,
                deadline=iso(deadline))
    return ctx.park("paused", pending, None)


__all__ = ["gate", "guarded"]
