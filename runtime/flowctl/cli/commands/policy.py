"""``flowctl policy check TOOL --input JSON [--run-input JSON] [--context JSON] [--param K=V]``:
explain what the gate would decide, without running (the run's input, context and params are
what ``allow`` checks see as ``run_input``, ``context`` and ``params``).

Exit 0 allow, 1 deny, 3 review, 2 unusable (an input the contract's ``input_schema`` rejects,
which never reaches the gate; a policy governing the tool has a regex RE2 cannot run: the FC701
diagnostic, located; at run time the gate denies such a check). Rate and dedupe are counted against the configured store, but
nothing is recorded.

``flowctl policy report [--since 7d] [--format text|json] [--fail-on-never]``: every rule of every
policy with its hit counts over the window (:func:`flowctl.gate.report.rule_report`), from the
``policy_decided`` events of runs and the decisions ``flowctl serve`` logged. Exit 0; with
``--fail-on-never``, 1 when some rule never triggered (denied, warned or asked for a review).
"""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_PAUSED
from flowctl.cli.commands._common import open_project, open_store, parse_json_arg, parse_params


def run(tool=None, input=None, flow=None, run_id=None, root=None, db=None, fmt="text", run_input=None, context=None,
        params=(), action="check", since="7d", fail_on_never=False) -> int:
    if action == "report":
        return report(root, db, fmt, since, fail_on_never)
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


def report(root, db, fmt, since, fail_on_never) -> int:
    """``policy report``: the rules' health over ``--since`` (module doc); exit 0, or 1 with
    ``fail_on_never`` when a rule never triggered."""
    from flowctl.cli.commands._common import open_reader
    from flowctl.cli.commands.stats import parse_since
    from flowctl.engine.clock import iso
    from flowctl.gate.report import rule_report
    from flowctl.store.query import EventFilter, query_events, service_decisions

    project = open_project(root)
    low = parse_since(since)
    store = open_reader(db, project.root, empty_ok=True)
    try:
        counted = {"runs": 0, "serve": 0}

        def decisions():
            for ev in query_events(store, EventFilter(type="policy_decided", since=low)):
                counted["runs"] += 1
                yield dict(ev["data"] if isinstance(ev["data"], dict) else {}, ts=ev["ts"])
            for d in service_decisions(store, low):
                counted["serve"] += 1
                yield d

        found = rule_report(project, decisions())
    finally:
        store.close()
    never = [r for r in found["rules"] if r["never_triggered"]]
    window = f"since {iso(low)}" if low is not None else "all time"
    if fmt == "json":
        for r in found["rules"]:
            r["last_triggered_time"] = iso(r["last_triggered"]) if r["last_triggered"] is not None else None
        click.echo(json.dumps(dict(found, since=low, from_runs=counted["runs"], from_serve=counted["serve"]), indent=2))
    else:
        click.echo(f"{found['decisions']} gate decisions {window} ({counted['runs']} in runs, {counted['serve']} from "
                   f"flowctl serve; {found['no_policy']} read-only or default-deny)")
        for r in found["rules"]:
            rates = ("" if r["deny_rate"] is None
                     else f"  deny {r['deny_rate']:.1%} warn {r['warn_rate']:.1%} of {r['evaluated']}")
            last = "  " + click.style("never triggered", fg="yellow") if r["never_triggered"] else \
                f"  last {iso(r['last_triggered'])}"
            click.echo(f"{r['policy']} / {r['rule']} ({r['effect']}): allow {r['allow']} deny {r['deny']} "
                       f"warn {r['warn']} review {r['review']}{rates}{last}")
        if not found["rules"]:
            click.echo("no policies in this project")
        if found["unknown"]:
            click.echo(f"note: {found['unknown']} decision(s) name a policy or rule this project no longer has", err=True)
    return EXIT_FAILED if fail_on_never and never else EXIT_OK
