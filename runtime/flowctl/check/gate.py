"""Validate checks of the gate's boundary (run from :data:`flowctl.check.checks.CHECKS`).

- FC702 (warning): a side-effecting tool no policy allows, wherever a tool is named — a task's
  ``tool``, a review's ``notify``, an ``on_error`` ``fallback`` — is denied on every call.
- FC704: contracts with the same ``entrypoint`` (the same function) that disagree on its side
  effects or on the policies that apply: the gate follows the function, so a read-only or
  differently-governed alias would be a way around it.
- FC705: a ``verify``/``compensate``/``snapshot`` naming a gated tool's function (run around the gate).
- FC606: an ``entrypoint``/``verify``/``compensate``/``snapshot`` that does not resolve to tool code
  (``orchestration/tools/`` or ``tool_packages``), e.g. ``os:system``, ``builtins:eval``.
"""
from __future__ import annotations

import json

from flowctl.definition.model import Project
from flowctl.definition.toolpath import function_key


def tool_refs(state):
    """``(ref, path)`` of every tool a state names: ``tool``, ``notify``, each ``on_error`` fallback,
    an agent's ``tools``."""
    refs = [(state.tool, ("tool",)), (state.raw.get("notify"), ("notify",))]
    refs += [(h.fallback, h.path + ("fallback",)) for h in state.on_error]
    if state.type == "agent":  # the contracts an agent's model may call
        refs += [(ref, ("tools", i)) for i, ref in enumerate(state.raw.get("tools") or ())]
    return [(ref, path) for ref, path in refs if isinstance(ref, str) and ref]


def _policies_of(project: Project) -> dict:
    out: dict = {}
    for name in sorted(project.policies):
        for tool in project.policies[name].applies_to:
            out.setdefault(tool, []).append(name)
    return out


def _gated_functions(project: Project) -> set:
    return {c.entrypoint for found in project.contracts.values() for c in found if c.side_effecting}


def check_gate(project: Project):
    """FC702: a side-effecting tool (or one whose function another contract declares
    side-effecting) named by a state that no policy allows: every call is denied."""
    if any(kind == "policy" for kind, _ in project.broken):
        return  # a policy file that does not load may be the one that allows it: its own error says so
    covered = _policies_of(project)
    gated = _gated_functions(project)
    sharing: dict = {}
    for found in project.contracts.values():
        for c in found:
            sharing.setdefault(c.entrypoint, set()).add(c.id)
    seen = set()
    for state in project.states.values():
        for ref, path in tool_refs(state):
            contract = project.resolve_tool(ref)
            if contract is None or contract.entrypoint not in gated:
                continue
            if any(covered.get(i) for i in sharing.get(contract.entrypoint, {contract.id})):
                continue
            if (state.id, contract.id, path[0]) in seen:
                continue
            seen.add((state.id, contract.id, path[0]))
            where = {"tool": "", "notify": " (the review's notify tool)"}.get(path[0], " (a fallback)")
            yield state.doc.diag("FC702", f"'{contract.id}'{where} has side effects and no policy allows it: every "
                                 f"call from '{state.id}' is denied (default deny)", path,
                                 hint=f"add orchestration/policies/<name>.yaml with applies_to: [{contract.id}]")


def _effects(contract) -> str:
    return json.dumps(sorted(json.dumps(e, sort_keys=True, default=str) for e in contract.side_effects))


def check_same_function(project: Project):
    """FC704: contracts naming the same entrypoint must declare the same side effects and be
    governed by the same policies (reported on each of them)."""
    by_entry: dict = {}
    for found in project.contracts.values():
        for c in found:
            by_entry.setdefault(c.entrypoint, []).append(c)
    yield from _disagreements(project, by_entry)


def import_same_function(project: Project, resolve):
    """FC704 with ``--import-check``: contracts whose entrypoints *resolve* to the same function
    under different names (a module re-exporting another's function). ``resolve(ref)`` gives the
    imported object or None."""
    by_object: dict = {}
    names: dict = {}
    kept: list = []
    for found in project.contracts.values():
        for c in found:
            obj = resolve(c.entrypoint)
            if obj is not None:
                kept.append(obj)  # alive while their ids are compared
                by_object.setdefault(function_key(obj), []).append(c)
                names.setdefault(function_key(obj), set()).add(c.entrypoint)
    aliased = {key: contracts for key, contracts in by_object.items() if len(names[key]) > 1}
    yield from _disagreements(project, {contracts[0].entrypoint: contracts for contracts in aliased.values()})


def import_gated_helpers(project: Project, resolve):
    """FC705 with ``--import-check``, by identity: a ``verify``/``compensate``/``snapshot`` that
    *resolves* to a gated tool's function under another name (a module re-exporting it), which
    the static check (by name) cannot see; ``flowctl run`` refuses it the same way (breaker
    finding: validate passed it). ``resolve(ref)`` gives the imported object or None."""
    governed = {tool for p in project.policies.values() for tool in p.applies_to}
    gated, kept = {}, []
    for found in project.contracts.values():
        for c in found:
            obj = resolve(c.entrypoint) if (c.side_effecting or c.id in governed) else None
            if obj is not None:
                kept.append(obj)  # alive while their ids are compared
                gated.setdefault(function_key(obj), c)
    for found in project.contracts.values():
        for c in found:
            for key in HELPERS:
                ref = getattr(c, key, None)
                obj = resolve(ref) if isinstance(ref, str) and ":" in ref else None
                owner = gated.get(function_key(obj)) if obj is not None else None
                if owner is not None and ref != owner.entrypoint:  # (the same name: the static FC705)
                    yield c.doc.diag("FC705", f"{key} {ref} is {owner.entrypoint}, the function of {owner.ref}, a "
                                     f"gated tool: the engine calls {key} without asking the gate, so it would run "
                                     "around its policy", (key,),
                                     hint=f"give {key} its own function (one that reads, or undoes, without acting "
                                          "through the gated tool)")


def _disagreements(project: Project, groups: dict):
    policies = _policies_of(project)
    for entry, contracts in sorted(groups.items()):
        if len(contracts) < 2:
            continue
        for c in contracts:
            for other in contracts:
                if other is c:
                    continue
                problem = None
                if _effects(other) != _effects(c):
                    said = "declares no side effects" if not other.side_effects else "declares other side effects"
                    mine = "none" if not c.side_effects else f"{len(c.side_effects)} side effect(s)"
                    problem = f"{other.ref} {said} for it (this one: {mine})"
                elif other.id != c.id and policies.get(other.id, []) != policies.get(c.id, []):
                    def names(tool):
                        return ", ".join(policies.get(tool, [])) or "no policy"

                    problem = f"{other.ref} is governed by {names(other.id)}, this one by {names(c.id)}"
                if problem:
                    yield c.doc.diag("FC704", f"entrypoint {c.entrypoint} is the same function as {other.ref}'s, but {problem}: "
                                     "the gate follows the function, so its contracts must agree", ("entrypoint",),
                                     hint="declare the same side_effects and name every id in the same policies' "
                                          "applies_to, or give each contract its own function")
                    break


#: the functions a contract names besides its entrypoint: the engine calls them outside the gate
HELPERS = ("verify", "compensate", "snapshot")


def check_helpers_outside_the_gate(project: Project):
    """FC705: a contract's ``verify``, ``compensate`` or ``snapshot`` names the entrypoint of a
    side-effecting or policy-governed tool: the engine calls those functions without asking the
    gate, so the tool would run around its policy (``flowctl run`` refuses such a flow too)."""
    governed = {tool for p in project.policies.values() for tool in p.applies_to}
    gated: dict = {}
    for found in project.contracts.values():
        for c in found:
            if c.side_effecting or c.id in governed:
                gated.setdefault(c.entrypoint, c.ref)
    for found in project.contracts.values():
        for c in found:
            for key in HELPERS:
                ref = getattr(c, key, None)
                if isinstance(ref, str) and ref in gated:
                    yield c.doc.diag("FC705", f"{key} {ref} is the function of {gated[ref]}, a gated tool: the engine "
                                     f"calls {key} without asking the gate, so it would run around its policy", (key,),
                                     hint=f"give {key} its own function (one that reads, or undoes, without acting "
                                          "through the gated tool)")


def check_tool_code(project: Project):
    """FC606: entrypoint, verify, compensate and snapshot resolve only to tool code (see flowctl.definition.toolpath)."""
    from flowctl.definition.toolpath import HINT, ref_problem

    tools_dir = project.orchestration / "tools"
    for found in project.contracts.values():
        for c in found:
            for key in ("entrypoint",) + HELPERS:
                ref = getattr(c, key, None)
                if not ref or ref == "none":
                    continue
                problem = ref_problem(ref, tools_dir, project.tool_packages)
                if problem:
                    yield c.doc.diag("FC606", f"{key} {ref} is refused: {problem}", (key,), hint=HINT)
