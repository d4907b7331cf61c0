"""What a flow depends on: the files, the flows its parallel/map/subflow states start, the parts
it names that the project lacks (used to refuse a broken flow before a run and to find a run's
sensitive fields).

:func:`refuse_unchecked` is the refusal a run makes first: :func:`refuse_broken` on what
``validate`` finds, skipped when the same definition was already found runnable for this flow.
That is remembered in ``<root>/.flowctl/cache/checked-v1.json``: keys, each the sha256 of the
project's definition digest (every definition file's path and bytes), the flow's id, flowctl's
version and the size and modification time of the modules that decide (``definition/``,
``check/``, this one). Any changed definition file changes the digest, so it is checked again
before it runs; a cache that does not parse, or cannot be written, only means checking again.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from flowctl.check.topology import child_flows, flow_graph
from flowctl.diagnostics import ERROR
from flowctl.errors import DefinitionError

CHECKED_NAME = "checked-v1.json"
#: keys kept in the cache (the newest): one per definition digest and flow run lately
CHECKED_KEEP = 64


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
    """Raise :class:`DefinitionError` (exit 1, as ``validate``) when ``flow`` cannot run as defined:
    an error among ``diagnostics`` (what ``validate(project)`` found) in a file the flow depends on,
    or in the file of a state, tool or flow it names that did not load; or a part it names that is
    not defined."""
    files = flow_files(project, flow)
    missing = missing_parts(project, flow)
    errors = [d for d in diagnostics if d.severity == ERROR
              and (d.file in files or Path(d.file).stem.split(".")[0] in missing)]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise DefinitionError(f"flow '{flow.id}' has definition errors: {first.location}: {first.message}{more}",
                           hint="run: flowctl validate")
    if missing:
        raise DefinitionError(f"flow '{flow.id}' uses {missing[0]!r}, which is not defined", hint="run: flowctl validate")
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
    raise DefinitionError(f"flow '{flow.id}' calls tools and a file the gate reads does not load: {where}",
                       hint="the gate decides only on policies and contracts that load; fix the file (flowctl validate)")


def _code_stamp() -> str:
    """Name, size and modification time of every module whose verdict the cache stands for."""
    found = _STAMP.get("code")
    if found is None:
        here = Path(__file__).resolve().parent.parent  # flowctl/
        parts = []
        for folder in ("definition", "check", "expr"):
            for top, dirs, names in sorted(os.walk(here / folder)):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in sorted(names):
                    if name.endswith((".py", ".json")):
                        st = os.stat(os.path.join(top, name))
                        parts.append(f"{os.path.relpath(os.path.join(top, name), here)}:{st.st_size}:{st.st_mtime_ns}")
        st = os.stat(__file__)
        parts.append(f"flowfiles:{st.st_size}:{st.st_mtime_ns}")
        found = _STAMP["code"] = "|".join(parts)
    return found


_STAMP: dict = {}


def check_key(project, flow_id: str) -> str:
    """The cache key of "``flow_id`` of this definition passed :func:`refuse_broken`"."""
    from flowctl import __version__

    text = "\0".join((__version__, _code_stamp(), project.digest(), flow_id))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _cache_file(project) -> Path | None:
    root = getattr(project, "root", None)
    return None if root is None else Path(root) / ".flowctl" / "cache" / CHECKED_NAME


def _read_checked(path: Path | None) -> list:
    if path is None:
        return []
    try:
        keys = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def was_checked(project, flow) -> bool:
    """Whether ``flow`` of this very definition was found runnable before (see the module docstring)."""
    return check_key(project, flow.id) in _read_checked(_cache_file(project))


def remember_checked(project, flow) -> None:
    """Record that ``flow`` of this definition passed :func:`refuse_broken` (best effort: a folder
    that cannot be written keeps no cache; the next run checks again)."""
    path = _cache_file(project)
    if path is None or not (path.parent.parent.is_dir() or path.parent.parent.parent.is_dir()):
        return
    key = check_key(project, flow.id)
    keys = [k for k in _read_checked(path) if k != key][-(CHECKED_KEEP - 1):] + [key]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(keys))
        os.replace(tmp, path)
    except OSError:
        pass


def refuse_unknown_profile(project, flow) -> None:
    """Refuse (``UsageError``, before a run is created) a ``FLOWCTL_MODEL_PROFILE`` naming no
    profile of ``orchestration/models.yaml`` when ``flow`` has a model state on ``model: default``
    (which the variable overrides). A state naming an unknown profile itself is FC901 (validate)."""
    import os

    wanted = os.environ.get("FLOWCTL_MODEL_PROFILE")
    if not wanted:
        return
    models = getattr(project, "models", None)
    known = set(models.profiles) if models is not None else set()
    if wanted in known:
        return
    for sid in sorted(flow_graph(project, flow)):
        state = project.states.get(sid)
        if state is not None and state.type in ("llm", "agent") and getattr(state, "model", None) == "default":
            from flowctl.errors import UsageError

            raise UsageError(f"FLOWCTL_MODEL_PROFILE={wanted} names no profile of orchestration/models.yaml "
                             f"(state '{sid}' of flow '{flow.id}' would use it)",
                             hint="profiles: " + (", ".join(sorted(known)) or "none") + "; or unset the variable")


def refuse_unchecked(project, flow, diagnostics=None) -> None:
    """:func:`refuse_broken` of ``flow`` on ``diagnostics`` (None: ``validate(project)``, run only
    when needed), unless this definition's ``flow`` passed it before; a pass is remembered.
    Raises :class:`DefinitionError` as :func:`refuse_broken` does."""
    if was_checked(project, flow):
        return
    if diagnostics is None:
        from flowctl.check.checks import validate

        diagnostics = validate(project)
    refuse_broken(project, flow, diagnostics)
    remember_checked(project, flow)


__all__ = ["flow_files", "missing_parts", "refuse_broken", "refuse_unchecked", "refuse_unknown_profile", "started_flows", "tool_refs",
           "was_checked", "remember_checked", "check_key"]
