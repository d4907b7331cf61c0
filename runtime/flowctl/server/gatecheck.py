"""``POST /v1/gate/check``: the engine's gate, asked by a caller outside any run.

The answer is what a task state calling the same tool with the same input would get, in the same
order (:func:`flowctl.engine.calls.call_tool`, then :func:`flowctl.engine.gatecall.gate`):

1. no contract matches the reference: ``deny`` (rule ``unknown-tool``: default deny);
2. the input does not satisfy the contract's ``input_schema``: ``deny`` (rule ``input-schema``; a
   run fails such a call with ``SchemaMismatch`` before the gate is asked);
3. :meth:`flowctl.gate.policy.Gate.decide`, following the function as the engine does (the
   policies of every contract on the same entrypoint, or on the same resolved function object:
   :func:`~flowctl.gate.policy.function_aliases`). The session stands where a run would: ``rate
   per: run`` and ``dedupe`` count per session, and ``allow`` checks see ``run.id`` = the session,
   ``flow`` = ``''``, and empty ``run_input``, ``params`` and ``context`` — a caller cannot supply
   the run data a policy trusts.

A real check (not ``dry_run``) that is allowed is counted by the policies' ``rate`` and ``dedupe``
(the gate log, as a run's call is), and every real check is appended to the service log with the
caller and the session's next sequence number (:mod:`flowctl.store.servicelog`). A dry run is
neither recorded nor counted. What is kept never holds the input: its digest, and the reason with
the contract's ``sensitive`` fields' values redacted.
"""
from __future__ import annotations

import time

from flowctl.definition.runtime_schemas import check_instance
from flowctl.engine.sensitive import Secrets
from flowctl.gate.policy import Decision, function_aliases, input_digest


def _aliases(service, contract) -> tuple:
    """Other contract ids whose entrypoint resolves to the function ``contract`` runs (cached)."""
    cache = service.aliases
    if contract.ref not in cache:
        engine = service.engine
        folder = str(service.project.orchestration / "tools")
        try:
            fn = engine.tool_function(contract, "entrypoint", folder)
            found = tuple(i for i in function_aliases(engine, service.project, fn, folder) if i != contract.id)
        except Exception:  # noqa: BLE001 - unimportable: only the entrypoint name ties it to others
            found = ()
        cache[contract.ref] = found
    return cache[contract.ref]


def refusal(service, tool: str, tool_input) -> tuple:
    """``(Decision or None, contract or None)``: the denial a call gets before the gate is asked
    (rules 1 and 2 above), or None and the contract the gate decides for."""
    contract = service.project.resolve_tool(tool)
    if contract is None:
        return Decision("deny", rule="unknown-tool", reason=f"no contract matches '{tool}' (default deny)"), None
    if contract.input_schema:
        problem = check_instance(contract.input_schema, tool_input)
        if problem:
            return Decision("deny", rule="input-schema", reason=f"the input does not match the input_schema of "
                                                                f"{contract.ref} {problem}"), contract
    return None, contract


def check(service, caller, tool: str, tool_input, session: str | None, dry_run: bool) -> dict:
    """The gate's answer as the API returns it (:class:`flowctl.server.models.GateDecision`)."""
    session = session or caller.name
    decision, contract = refusal(service, tool, tool_input)
    digest = input_digest(tool_input)
    if decision is None:
        decision = service.gate.decide(contract, tool_input, run_id=session, flow="", record=not dry_run,
                                       digest=digest, run_input=None, params={}, context={},
                                       also=_aliases(service, contract))
    secrets = Secrets(contract.sensitive if contract is not None else ())
    secrets.learn(tool_input)
    reason = secrets.text(decision.reason) if secrets.values else decision.reason
    ref = contract.ref if contract is not None else tool
    seq = None
    if not dry_run:
        row = service.log.append(session, {"at": time.time(), "caller": caller.name, "kind": "gate_check", "tool": ref,
                                           "digest": digest, "outcome": decision.outcome, "policy": decision.policy,
                                           "rule": decision.rule, "reason": reason})
        seq = row["seq"]
    return {"decision": decision.outcome, "tool": ref, "policy": decision.policy, "rule": decision.rule,
            "reason": reason, "session": session, "seq": seq, "dry_run": dry_run, "caller": caller.name}


__all__ = ["check", "refusal"]
