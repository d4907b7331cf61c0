"""``flowctl policy check TOOL --input JSON [--run-input JSON] [--context JSON] [--param K=V]``:
explain what the gate would decide, without running (the run's input, context and params are
what ``allow`` checks see as ``run_input``, ``context`` and ``params``).

Exit 0 allow, 1 deny, 3 review, 2 unusable (an input the contract's ``input_schema`` rejects,
which never reaches the gate; a policy governing the tool has a regex RE2 cannot run: the FC701
diagnostic, located; at run time the gate denies such a check). Rate and dedupe are counted against the configured store, but
nothing is recorded.
"""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_PAUSED
from flowctl.cli.commands._common import open_project, open_store, parse_json_arg, parse_params


def run(tool, input, flow, run_id, root, db, fmt, run_input=None, context=None, params=()) -> int:
    from flowctl.engine.clock import SystemClock
    from flowctl.errors import UsageError
    from flowctl.gate.policy import Gate
    from flowctl.definition.kinds import did_you_mean

    project = open_project(root)
    contract = project.resolve_tool(tool)
    if contract is None:
        raise UsageError(f"no contract matches '{tool}'", hint=did_you_mean(tool.split("@")[0], project.contracts)
                         or "contracts: " + ", ".join(sorted(project.contracts)))
    from flowctl.check.checks import policy_regex_problems

    gate_ids = set(Gate(project, None, None).function_ids(contract))
    broken = [d for p in project.policies.values() if gate_ids & set(p.applies_to)
              for check in p.allow if check.op == "regex" for d in policy_regex_problems(p, check)]
    if broken:  # the gate denies every call such a check governs: say where, do not decide
        d = broken[0]
        raise UsageError(f"{d.location}: {d.code} {d.message}",
                         hint=d.hint or "fix the policy (flowctl validate lists every problem); until then the gate "
                                        "denies the calls it governs")
    tool_input = parse_json_arg(input, "--input")
    if contract.input_schema:  # at run time such an input fails before the gate is asked
        from flowctl.definition.runtime_schemas import check_instance

        problem = check_instance(contract.input_schema, tool_input if tool_input is not None else {})
        if problem:
            raise UsageError(f"--input does not match the input_schema of {contract.ref} {problem}",
                             hint="a run fails such a call with SchemaMismatch before the gate decides; "
                                  "give an input the contract accepts")
    seen = {"run_input": parse_json_arg(run_input, "--run-input"), "context": parse_json_arg(context, "--context"),
            "params": parse_params(params, None)}
    store = open_store(db, project.root, empty_ok=True)
    try:
        decision = Gate(project, store, SystemClock()).decide(contract, tool_input if tool_input is not None else {},
                                                             run_id=run_id or "", flow=flow or "", record=False, **seen)
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps(dict(decision.as_dict(), tool=contract.ref), indent=2))
    else:
        colour = {"allow": "green", "deny": "red"}.get(decision.outcome, "yellow")
        click.echo(f"{contract.ref}: " + click.style(decision.outcome, fg=colour, bold=True))
        click.echo(f"  decided by: {decision.policy or '(no policy)'} / {decision.rule}")
        click.echo(f"  why: {decision.reason}")
        for w in decision.warnings:
            click.echo("  " + click.style("warning", fg="yellow") + f" ({w['policy']} / {w['rule']}): {w['reason']}")
    return {"allow": EXIT_OK, "deny": EXIT_FAILED}.get(decision.outcome, EXIT_PAUSED)
