"""``flowctl test [FLOW] [--contracts] [--min-coverage N] [--suggest] [--junit FILE] [--record]``.

Golden path cases (``orchestration/tests/<flow>/*.yaml``) run with mocked tools on a fake clock;
failures print as path diffs; coverage per flow. Model steps the case does not mock answer from
its cassette (``orchestration/tests/<flow>/cassettes/<case>.yaml``); ``--record`` writes that
cassette from the real provider of each such state's profile (:mod:`flowctl.testing.cassettes`). ``--contracts`` runs the contract tests instead
(the real tools, in their sandbox). Exit 0 all passed (and coverage met), 1 a failure, coverage
below ``--min-coverage`` or definition errors (golden cases refuse flows whose files have
``flowctl validate`` errors, ``--contracts`` refuses a project with any, naming the first), 2
unusable (malformed case files, an unknown flow, no cases to run).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from flowctl.errors import DefinitionError, UsageError


def run(flow, contracts: bool, min_coverage, suggest: bool, junit, root, record: bool = False) -> int:
    from flowctl.definition.loader import find_root, load_project

    if min_coverage is not None and not 0 <= min_coverage <= 100:
        raise UsageError(f"--min-coverage {min_coverage:g}: give a percentage from 0 to 100")
    if contracts and (min_coverage is not None or suggest):
        raise UsageError("--min-coverage and --suggest are about golden cases; run them without --contracts",
                         hint="make test runs both: flowctl test --min-coverage 100 && flowctl test --contracts")
    if contracts and record:
        raise UsageError("--record records the model replies of golden cases; contract tests call no model",
                         hint="flowctl test --record (without --contracts)")
    if root and not Path(root).exists():
        raise UsageError(f"no such folder: {root}")
    project = load_project(find_root(root) if root else None)
    color = sys.stdout.isatty()
    flows, files = _selection(project, flow)
    if contracts:
        return _contracts(project, flows, junit, color)
    return _cases(project, flows, files, min_coverage, suggest, junit, color, record)


def _selection(project, flow):
    """``(flow ids, case files or None)`` named by the FLOW argument: a flow id, a case file, or a
    folder of cases; None means every flow."""
    if flow is None:
        return None, None
    path = Path(flow)
    if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
        return [path.resolve().parent.name], [path]
    if path.is_dir() and path.resolve().parent.name == "tests":
        return [path.resolve().name], None
    if path.is_dir():  # a folder of cases elsewhere: named for its flow, as under orchestration/tests/
        name = path.resolve().name
        if name not in project.flows:
            from flowctl.definition.kinds import unknown_flow_hint

            raise UsageError(f"{flow}: a folder of golden cases is named for the flow its cases run, and there "
                             f"is no flow '{name}'", hint=unknown_flow_hint(name, project.flows))
        cases = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
        if not cases:
            raise UsageError(f"{flow}: no case files (.yaml, .yml, .json) in this folder")
        return [name], cases
    if flow not in project.flows:
        from flowctl.definition.kinds import no_flow

        if ("flow", flow) in project.broken:
            raise DefinitionError(f"flow '{flow}' has definition errors", hint="run: flowctl validate")
        raise no_flow(flow, project.flows)
    return [flow], None


def _display(project):
    cwd = Path.cwd()

    def show(rel: str) -> str:
        full = project.root / rel
        shown = os.path.relpath(full, cwd)
        return shown if not shown.startswith(".." + os.sep + "..") else str(full)

    return show


def _style(color):
    def style(text, **kw):
        return click.style(text, **kw) if color else text

    return style


# ------------------------------------------------------------------------------------ golden cases
def _cases(project, flows, files, min_coverage, suggest, junit, color, record=False) -> int:
    from flowctl.testing import coverage as cov_mod
    from flowctl.testing.cases import format_diagnostic, load_cases
    from flowctl.testing.runner import ERROR as CASE_ERROR
    from flowctl.testing.runner import FAILED as CASE_FAILED
    from flowctl.testing.runner import one_line, run_case

    style = _style(color)
    show = _display(project)
    cases, diags = load_cases(project, flows, files)
    for d in diags:
        click.echo(format_diagnostic(d, lambda x: show(x.file)), err=True)
    if any(d.severity == "error" for d in diags):
        errors = sum(d.severity == "error" for d in diags)
        click.echo(f"{errors} case file error{'s' * (errors != 1)}: fix {'them' if errors != 1 else 'it'} to run the "
                   "golden cases", err=True)
        return EXIT_USAGE
    if not cases and not suggest:
        where = f"orchestration/tests/{flows[0]}/" if flows else "orchestration/tests/<flow>/"
        raise UsageError(f"no golden cases in {where}",
                         hint="flowctl test --suggest prints a case skeleton per transition; the format is in "
                              "docs/reference.md ('Testing flows')")
    _check_definitions(project, sorted({c.flow for c in cases}))
    started = time.perf_counter()
    results = []
    for case in cases:
        r = run_case(project, case, record=record)
        results.append(r)
        steps = f"{len(r.path)} step{'s' * (len(r.path) != 1)}"
        if record:
            _recorded(r, show)
        if r.passed:
            click.echo(f"{style('PASS', fg='green', bold=True)}  {case.id}  ({steps})")
            continue
        label = "FAIL" if r.status == CASE_FAILED else "ERROR"
        click.echo(f"{style(label, fg='red', bold=True)}  {case.id}  {show(case.file)}")
        for line in r.report().splitlines():
            click.echo("      " + line)
        if r.status == CASE_ERROR and r.path:
            click.echo(f"      the run got as far as: {one_line(r.path)}")
    elapsed = time.perf_counter() - started
    if record and not any(r.cassette for r in results):
        click.echo("nothing recorded: every model step of these cases is mocked by the case or on a fake profile "
                   "(FLOWCTL_MODEL_PROFILE chooses the profile of states with model: default)", err=True)
    flow_ids = flows if flows is not None else sorted(project.flows)
    coverages = cov_mod.compute(project, flow_ids, results)
    click.echo("")
    click.echo("coverage (exercised by the golden cases / all):")
    for line in cov_mod.table(coverages).splitlines():
        click.echo("  " + line)
    failed = [r for r in results if not r.passed]
    fake = sum(r.fake_seconds for r in results)
    summary = f"{len(results) - len(failed)} passed, {len(failed)} failed in {elapsed:.2f}s"
    if fake >= 1:
        summary += f" ({_human(fake)} of flow time passed on the fake clock)"
    below = []
    if min_coverage is not None:
        for c in coverages.values():
            for kind, pct in c.below(min_coverage):
                below.append((c, kind, pct))
    if suggest:
        suggestions = []
        for c in coverages.values():
            suggestions.extend(cov_mod.suggest(project, project.flows[c.flow], c, results))
        click.echo("")
        if suggestions:
            click.echo(f"{len(suggestions)} uncovered item{'s' * (len(suggestions) != 1)}, with a case that would reach each:")
            for s in suggestions:
                click.echo("")
                click.echo(s.text())
        else:
            click.echo("nothing uncovered: every transition, handler and error edge is exercised")
    if junit:
        from flowctl.testing import junit as junit_mod

        junit_mod.write(junit, results, (), coverages)
    click.echo("")
    for c, kind, pct in below:
        missing = [i.label for i in c.items[kind] if not i.covered]
        click.echo(style(f"coverage of {c.flow} {kind} is {pct:.1f}%, below --min-coverage {min_coverage:g}%", fg="red"))
        for label in missing:
            click.echo(f"    not exercised: {label}")
    if below:
        click.echo("    (flowctl test --suggest prints a case skeleton for each)")
    ok = not failed and not below
    click.echo(style(summary, fg="green" if ok else "red", bold=True))
    return EXIT_OK if ok else EXIT_FAILED


def _recorded(result, show) -> None:
    """What ``--record`` wrote for one case (or why it wrote nothing)."""
    if result.cassette:
        calls = f"{result.recorded} model call{'s' * (result.recorded != 1)}"
        click.echo(f"REC   {result.case.id}  {calls} → {show(result.cassette)}")
    elif result.unrecorded:
        click.echo(f"REC   {result.case.id}  {result.unrecorded}", err=True)


def _check_definitions(project, flow_ids) -> None:
    """Refuse (exit 1, as ``validate``) flows whose definition files have errors, as ``flowctl run`` does."""
    from flowctl.check.checks import validate
    from flowctl.engine.flowfiles import refuse_broken

    diags = None
    for fid in flow_ids:
        flow = project.flows.get(fid)
        if flow is not None:
            diags = validate(project) if diags is None else diags
            refuse_broken(project, flow, diags)


def _check_project(project) -> None:
    """Refuse (exit 1, as ``validate``) contract tests of a project with validate errors: they call real tools, and
    a project the gate cannot trust (e.g. FC704, contracts disagreeing on a function's effects)
    must not decide which of them count as read-only."""
    from flowctl.check.checks import validate
    from flowctl.diagnostics import ERROR

    errors = [d for d in validate(project) if d.severity == ERROR]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise DefinitionError(f"the project has definition errors: {first.location}: [{first.code}] {first.message}{more}",
                           hint="run: flowctl validate; contract tests run real tools, so they need a valid project")


def _human(seconds: float) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{int(seconds // size)}{unit}")
            seconds %= size
    if seconds >= 1 or not parts:
        parts.append(f"{seconds:.0f}s")
    return " ".join(parts)


# ------------------------------------------------------------------------------------ contracts
def _contracts(project, flows, junit, color) -> int:
    from flowctl.testing.contract_tests import FAILED, PASSED, contracts_to_test, run_contract_tests

    style = _style(color)
    _check_project(project)
    chosen = contracts_to_test(project, flows)
    if not chosen:
        click.echo("no contract has side effects or examples: nothing to test")
        return EXIT_OK
    started = time.perf_counter()

    def show(r):
        if r.status == PASSED:
            tag = style("PASS", fg="green", bold=True)
        elif r.status == FAILED:
            tag = style("FAIL", fg="red", bold=True)
        else:
            tag = style("SKIP", fg="yellow", bold=True)
        where = f"  (sandbox {r.sandbox})" if r.sandbox else ""
        click.echo(f"{tag}  {r.name}{where}")
        if r.status == PASSED:
            click.echo("      " + " · ".join(s[0] for s in r.steps))
        else:
            for line in (r.report() or f"    {r.message}").splitlines():
                click.echo("  " + line)

    results = run_contract_tests(project, chosen, on_result=show)
    if junit:
        from flowctl.testing import junit as junit_mod

        junit_mod.write(junit, (), results)
    failed = [r for r in results if r.status == FAILED]
    skipped = [r for r in results if r.status not in (FAILED, PASSED)]
    summary = (f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped "
               f"in {time.perf_counter() - started:.2f}s")
    click.echo("")
    click.echo(style(summary, fg="red" if failed else "green", bold=True))
    return EXIT_FAILED if failed else EXIT_OK
