"""Loading only what one flow reaches: :func:`load_for_flow`.

A run of flow ``F`` needs F's flow file, the states it names (transitively, through handlers'
``goto`` and review timeouts), the flows its parallel/map/subflow states start (and theirs), the
contracts of every tool those states name, ``project.yaml``, every policy, and the contracts the
gate may need to find a tool under another name (every side-effecting contract, every contract a
policy names, every contract naming the same entrypoint as one of those). Those files are parsed and checked as :func:`~flowctl.definition.loader.load_project`
would; every other file is only read and hashed.

The run still pins the whole definition snapshot (every file that loads, as today), so which
other files are rejected (syntax, schema, id errors, duplicates) must be known: each file's facts
— rejected or not, the id it defines, a contract's side effects and entrypoint — are cached in
``<root>/.flowctl/cache/files-v1.json``, keyed by the sha256 of the file's path and bytes. A
changed file has a new key; an entry that is not exactly the expected shape, or a cache file that
does not parse, is ignored and the file is parsed again. The cache never decides whether a flow
may run: the files the flow reaches are always parsed afresh.

:func:`load_for_flow` returns ``None`` when a partial project could differ from the whole one for
this flow (the flow's own file or a file it reaches did not load, a duplicate id among them, a link
leaving the repository): the caller then loads the whole project as before.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType

from flowctl.definition import versions
from flowctl.definition.loader import EXTENSIONS, FOLDERS, PROJECT_FILES, find_root, load_files, read_tree
from flowctl.definition.model import Project
from flowctl.definition.profiles import MODELS_FILES, PROMPTS

CACHE_NAME = "files-v1.json"
_KINDS = frozenset(FOLDERS.values())


@dataclass(frozen=True)
class PartialProject(Project):
    """A :class:`Project` holding only the elements one flow reaches, with the whole project's
    ``files`` and ``rejected`` (so :attr:`snapshot` and :meth:`digest` are the whole project's).
    :meth:`whole` loads everything (once), for a run of another flow pinned to the same digest."""

    #: the flows loaded (the one asked for and the ones it starts)
    reached: frozenset = frozenset()

    def whole(self) -> Project:
        """The whole project, as :func:`~flowctl.definition.loader.load_project` loads it (cached)."""
        found = self.__dict__.get("_whole")
        if found is None:
            found = load_files(dict(self.files), self.root)  # (a partial project has no refused links)
            object.__setattr__(self, "_whole", found)
        return found


def file_key(rel: str, data: bytes) -> str:
    """The cache key of one file: sha256 (hex) of its relative path, a NUL, and its bytes."""
    return hashlib.sha256(rel.encode() + b"\0" + data).hexdigest()


def file_facts(rel: str, data: bytes) -> list:
    """``[rejected, kind, id, side_effecting, entrypoint]`` of one definition file on its own:
    ``rejected`` when loading refuses it for its own content; ``kind``/``id`` the element it defines
    (a contract's id is ``ID.vVERSION``), both None when it defines none; ``side_effecting`` and
    ``entrypoint`` (else None) of a contract that loads."""
    alone = load_files({rel: data})
    doc = alone.documents[0] if alone.documents else None
    kind = FOLDERS.get(rel.split("/")[1]) if rel not in PROJECT_FILES else None
    element = None
    if kind is not None and doc is not None and isinstance(doc.data, dict):
        field_name = {"state": "id", "flow": "flow", "contract": "id", "policy": "policy"}[kind]
        value = doc.data.get(field_name)
        if isinstance(value, str):
            element = value if kind != "contract" else f"{value}.v{doc.data.get('version')}"
    contracts = [c for found in alone.contracts.values() for c in found]
    entry = contracts[0].entrypoint if contracts and isinstance(contracts[0].entrypoint, str) else None
    return [rel in alone.rejected, kind if element is not None else None, element,
            any(c.side_effecting for c in contracts), entry]


def _valid_entry(entry) -> bool:
    return (isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], bool)
            and (entry[1] is None or entry[1] in _KINDS) and (entry[2] is None or isinstance(entry[2], str))
            and (entry[1] is None) == (entry[2] is None) and isinstance(entry[3], bool)
            and (entry[4] is None or isinstance(entry[4], str)))


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("version") == 1 else None
    return entries if isinstance(entries, dict) else {}


def _write_cache(path: Path, entries: dict) -> None:
    """Write the cache atomically (a temporary file renamed over it); a folder that cannot be
    written leaves no cache (the next run parses again)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"version": 1, "entries": entries}, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def all_facts(files: dict, cache_dir: Path) -> dict:
    """Relative path -> :func:`file_facts` of every file, from the cache where it has a valid entry."""
    path = cache_dir / CACHE_NAME
    cached = _read_cache(path)
    out, keep, fresh = {}, {}, False
    for rel, data in files.items():
        key = file_key(rel, data)
        entry = cached.get(key)
        if not _valid_entry(entry):
            entry, fresh = file_facts(rel, data), True
        out[rel] = keep[key] = entry
    if fresh or len(keep) != len(cached):
        _write_cache(path, keep)
    return out


def _duplicates(facts: dict) -> set:
    """Paths of the files loading refuses as a duplicate id (FC006): every file after the first,
    in path order, that defines the same element."""
    seen, dup = set(), set()
    for rel in sorted(facts):
        kind, element = facts[rel][1:3]
        if kind is None:
            continue
        if (kind, element) in seen:
            dup.add(rel)
        seen.add((kind, element))
    return dup


class _Index:
    """The files of each folder by the element id their name says (a contract by its tool id)."""

    def __init__(self, files):
        self.by: dict = {}
        for rel in files:
            parts = rel.split("/")
            if len(parts) != 3 or parts[1] not in FOLDERS:
                continue
            stem = parts[2].rsplit(".", 1)[0]
            kind = FOLDERS[parts[1]]
            name = stem.split(".v")[0] if kind == "contract" else stem
            self.by.setdefault((kind, name), []).append(rel)

    def get(self, kind: str, name) -> list:
        return self.by.get((kind, name), []) if isinstance(name, str) else []


def _reached_files(files: dict, facts: dict, flow_id: str):
    """``(paths, project)``: the files a run of ``flow_id`` needs and those files loaded together."""
    index = _Index(files)
    wanted = {rel for rel in files if rel in PROJECT_FILES or rel in MODELS_FILES
              or rel.startswith(("orchestration/policies/", PROMPTS))}
    wanted |= {rel for rel, f in facts.items() if f[1] == "contract" and f[3]}
    by_entry: dict = {}  # contracts naming one function must agree (FC704): all of them are checked
    for rel, f in facts.items():
        if f[4] is not None:
            by_entry.setdefault(f[4], []).append(rel)
    wanted |= set(index.get("flow", flow_id))
    singles: dict = {}  # path -> that file loaded on its own (each file is parsed once to follow it)
    while True:
        for rel in wanted - singles.keys():
            singles[rel] = load_files({rel: files[rel]})
        more = set()
        policies = [p for one in singles.values() for p in one.policies.values()]
        for policy in policies:
            for tool in policy.applies_to:
                more.update(index.get("contract", tool))
        for contract in [c for one in singles.values() for found in one.contracts.values() for c in found]:
            more.update(by_entry.get(contract.entrypoint, ()))
        for flow in [f for one in singles.values() for f in one.flows.values()]:
            for name, _ in flow.named_states():
                more.update(index.get("state", name))
        for state in [st for one in singles.values() for st in one.states.values()]:
            targets = [h.goto for h in state.on_error] + [(state.raw.get("on_timeout") or {}).get("goto")]
            for name in targets:
                more.update(index.get("state", name))
            agent_tools = list(state.raw.get("tools") or ()) if state.type == "agent" else []
            for ref in [state.tool, state.raw.get("notify")] + [h.fallback for h in state.on_error] + agent_tools:
                if isinstance(ref, str) and ref:
                    more.update(index.get("contract", versions.split_ref(ref)[0]))
            children = state.get("branches") if state.type == "parallel" else [state.get("flow")]
            for fid in children or ():
                more.update(index.get("flow", fid))
        if more <= wanted:
            return wanted, load_files({rel: files[rel] for rel in sorted(wanted)})
        wanted |= more


def load_for_flow(root, flow_id: str, cache_dir: str | os.PathLike | None = None) -> PartialProject | None:
    """The project a run of ``flow_id`` needs (see the module docstring), found from ``root`` as
    :func:`~flowctl.definition.loader.find_root` finds it; ``cache_dir`` defaults to
    ``<root>/.flowctl/cache``. ``None`` when only the whole project can say how this flow stands.
    Raises :class:`~flowctl.errors.ProjectError` when there is no project."""
    path = find_root(root)
    refused: dict = {}
    files = read_tree(path, refused)
    if refused:
        return None
    facts = all_facts(files, Path(cache_dir) if cache_dir is not None else path / ".flowctl" / "cache")
    duplicates = _duplicates(facts)
    rejected = {rel for rel, f in facts.items() if f[0]} | duplicates
    wanted, part = _reached_files(files, facts, flow_id)
    if flow_id not in part.flows or part.rejected or wanted & duplicates:
        return None
    values = {f.name: getattr(part, f.name) for f in fields(Project) if f.name != "_resolved"}
    values.update(root=path, files=MappingProxyType(dict(files)), rejected=frozenset(rejected))
    return PartialProject(**values, reached=frozenset(part.flows))


def load_states(root, ids) -> dict:
    """State id -> :class:`~flowctl.definition.model.State` for those of ``ids`` whose file (named
    after the id, in ``orchestration/states/``) loads; only those files are read. ``root`` is the
    project root (:func:`~flowctl.definition.loader.find_root`)."""
    folder = Path(root) / "orchestration" / "states"
    top = os.path.realpath(root).rstrip(os.sep) + os.sep
    files = {}
    for sid in sorted({i for i in ids if isinstance(i, str) and i and "/" not in i and not i.startswith(".")}):
        for ext in EXTENSIONS:
            path = folder / f"{sid}{ext}"
            if path.is_file() and os.path.realpath(path).startswith(top):  # never a link leaving the repository
                files[f"orchestration/states/{sid}{ext}"] = path.read_bytes()
    return dict(load_files(files, root).states) if files else {}


__all__ = ["PartialProject", "load_for_flow", "load_states", "file_facts", "file_key", "all_facts", "CACHE_NAME"]
