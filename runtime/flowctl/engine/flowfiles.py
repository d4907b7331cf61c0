"""What a flow depends on: the files, the flows its parallel/map/subflow states start, the parts
it names that the project lacks (used to refuse a broken flow before a run and to find a run's
sensitive fields)."""
from __future__ import annotations

from pathlib import Path

from flowctl.check.checks import child_flows, flow_graph
from flowctl.diagnostics import ERROR
from flowctl.errors import ProjectError


def tool_refs(state) -> list:
    """The tool references a state names: its ``tool``, a review's ``notify``, its handlers'
    fallbacks, an agent's ``tools``."""
    return [state.tool, getattr(state, "notify", None)] + [h.fallback for h in state.on_error] + list(
        getattr(state, "tools", ()) or ())


def missing_parts(project, flow) -> list:
    """States and tools the flow names that the project does not have (undefined, or their file did
    not load): running it would fail on the first one reached."""
    missing = [f for f in started_flows(project, flow, known_only=False) if f not in project.flows]
    for sid in sorted(flow_graph(project, flow)):
        state = project.states.get(sid)
        if state is None:
            missing.append(sid)
            continue
        for ref in tool_refs(state):
            if isinstance(ref, str) and ref and project.resolve_tool(ref) is None:
                missing.append(ref.split("@")[0])
    return missing


def started_flows(project, flow, known_only: bool = True) -> list:
    """Ids of the flows started by the parallel, map and subflow states of ``flow``."""
    found = []
    for sid in sorted(flow_graph(project, flow)):
        state = project.states.get(sid)
        for fid in child_flows(state) if state is not None else ():
            if isinstance(fid, str) and fid not in found and (fid in project.flows or not known_only):
                found.append(fid)
    return found


def flow_files(project, flow) -> set:
    """Relative paths of every file a flow depends on."""
    files = {flow.file}
    tools = set()
    for sid in flow_graph(project, flow):
        state = project.states.get(sid)
        if state is None:
            continue
        files.add(state.file)
        for ref in tool_refs(state):
            if ref:
                contract = project.resolve_tool(ref)
                if contract is not None:
                    files.add(contract.file)
                    tools.add(contract.id)
    for policy in project.policies.values():
        if tools & set(policy.applies_to):
            files.add(policy.file)
    return files


def refuse_broken(project, flow, diagnostics) -> None:
    """Raise :class:`ProjectError` (exit 2) when ``flow`` cannot run as defined: an error among
    ``diagnostics`` (what ``validate(project)`` found) in a file the flow depends on, or in the file
    of a state, tool or flow it names that did not load; or a part it names that is not defined."""
    files = flow_files(project, flow)
    missing = missing_parts(project, flow)
    errors = [d for d in diagnostics if d.severity == ERROR
              and (d.file in files or Path(d.file).stem.split(".")[0] in missing)]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProjectError(f"flow '{flow.id}' has definition errors: {first.location}: {first.message}{more}",
                           hint="run: flowctl validate")
    if missing:
        raise ProjectError(f"flow '{flow.id}' uses {missing[0]!r}, which is not defined", hint="run: flowctl validate")
    if any(ref for sid in flow_graph(project, flow) if (state := project.states.get(sid)) for ref in tool_refs(state)):
        _refuse_unloaded_gate_files(project, flow, diagnostics)


def _refuse_unloaded_gate_files(project, flow, diagnostics) -> None:
    """A flow that calls tools does not run while a policy or contract file does not load: the
    policy may be the one that limits the call, the contract a newer version of the tool or one
    declaring its function side-effecting (default deny rests on every such file being read)."""
    folders = (f"{project.orchestration.name}/policies/", f"{project.orchestration.name}/contracts/")
    broken = {kind for kind, _ in project.broken} & {"policy", "contract"}
    if not broken:
        return
    found = [d for d in diagnostics if d.severity == ERROR and d.file.startswith(folders)]
    where = f"{found[0].location}: {found[0].message}" if found else f"a {sorted(broken)[0]} file does not load"
    raise ProjectError(f"flow '{flow.id}' calls tools and a file the gate reads does not load: {where}",
                       hint="the gate decides only on policies and contracts that load; fix the file (flowctl validate)")


__all__ = ["flow_files", "missing_parts", "refuse_broken", "started_flows", "tool_refs"]
