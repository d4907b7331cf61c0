"""Finding and loading an ``orchestration/`` tree into a :class:`~flowctl.definition.model.Project`.

:func:`load_project` reads files from disk; :func:`load_files` builds the same project from a
mapping of relative paths to bytes (a stored definition snapshot, or files read from git
objects). Loading never raises for file content: syntax, schema and id problems become
diagnostics on ``Project.diagnostics``, and a file with errors is left out of the model (its id
kept in ``Project.broken``). Only an unusable invocation raises :class:`~flowctl.errors.ProjectError`.
"""
from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType

from flowctl.definition import kinds as schemas
from flowctl.definition import versions
from flowctl.diagnostics import ERROR, Diagnostic
from flowctl.definition.durations import parse_duration
from flowctl.definition.model import (STATE_FIELDS, STATE_MODELS, Check, Contract, Flow, Handler, Limits, Policy, Project, Retry,
                    State, Transition)
from flowctl.definition.yamlio import Document, read_document
from flowctl.definition.profiles import MODELS_FILES, PROMPTS, load_models, read_prompts

from flowctl.definition.root import FOLDERS, find_root  # noqa: F401 - the loader's names for them
EXTENSIONS = (".yaml", ".yml", ".json")
#: the optional project file (settings such as ``tool_packages``), directly in ``orchestration/``
PROJECT_FILES = tuple(f"orchestration/project{ext}" for ext in EXTENSIONS)


def read_tree(root: Path, refused: dict | None = None) -> dict[str, bytes]:
    """Relative path -> bytes of every definition file under ``root/orchestration``.

    Only the repository is read: a file (or a folder, or ``orchestration/`` itself) that is a
    symbolic link resolving outside ``root`` is never opened; it is put in ``refused`` (relative
    path -> where it leads) when given."""
    files: dict[str, bytes] = {}
    base = root / "orchestration"
    top = os.path.realpath(root)

    def inside(path) -> bool:
        real = os.path.realpath(path)
        return real == top or real.startswith(top.rstrip(os.sep) + os.sep)

    for folder in FOLDERS:
        directory = base / folder
        if not directory.is_dir():
            continue
        folder_inside = inside(directory)  # a plain file (not a link) in a folder inside is inside
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name.endswith(EXTENSIONS) and entry.is_file():
                rel = f"orchestration/{folder}/{entry.name}"
                if not ((folder_inside and not entry.is_symlink()) or inside(entry.path)):
                    if refused is not None:
                        refused[rel] = os.path.realpath(entry.path)
                    continue
                files[rel] = _read_bytes(entry.path)
    for rel in PROJECT_FILES:
        path = root / rel
        if path.is_file():
            if not inside(path):
                if refused is not None:
                    refused[rel] = os.path.realpath(path)
                continue
            files[rel] = path.read_bytes()
    for rel in MODELS_FILES:
        path = root / rel
        if path.is_file():
            if not inside(path):
                if refused is not None:
                    refused[rel] = os.path.realpath(path)
                continue
            files[rel] = path.read_bytes()
    files.update(read_prompts(root, inside, refused))
    return files


def _read_bytes(path: str) -> bytes:
    """The bytes of one file, by plain ``os.read`` calls (about half the cost of ``open().read()``,
    which counts in a tree of 10,000 files)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def load_project(root: str | os.PathLike | None = None) -> Project:
    """Load the project at ``root`` (or found from the current directory). See :func:`find_root`.
    A definition file that is a link leaving the repository is FC008 (and not read)."""
    path = find_root(root)
    refused: dict = {}
    return with_refused(load_files(read_tree(path, refused), path), refused)


def with_refused(project: Project, refused: dict) -> Project:
    """``project`` with an FC008 diagnostic (and a broken id) for each file :func:`read_tree` refused
    (``refused``: relative path -> where the link leads); ``project`` itself when there is none."""
    import dataclasses

    if not refused:
        return project
    diags = [Diagnostic("FC008", f"{rel} is a link to {target}, outside the repository; flowctl reads only "
                        "the repository", rel, hint="copy the file into the repository, or link inside it")
             for rel, target in sorted(refused.items())]
    broken = {(FOLDERS[rel.split("/")[1]], _guess_id(FOLDERS[rel.split("/")[1]], rel.split("/")[2].rsplit(".", 1)[0]))
              for rel in refused if rel.count("/") == 2 and rel.split("/")[1] in FOLDERS}
    return dataclasses.replace(project, diagnostics=project.diagnostics + tuple(diags), broken=project.broken | broken)


def load_files(files: dict[str, bytes], root: str | os.PathLike = ".") -> Project:
    """Build a project from ``{"orchestration/states/x.yaml": b"...", ...}``.

    The cyclic garbage collector is paused while loading: parsing allocates many small objects
    that are all kept (no cycles are created; recursive aliases are refused), and repeated full
    collections over the growing heap made large projects load in superlinear time.
    """
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_files(files, root)
    finally:
        if enabled:
            gc.enable()


def _load_files(files: dict[str, bytes], root: str | os.PathLike = ".") -> Project:
    states: dict = {}
    flows: dict = {}
    contracts: dict = {}
    policies: dict = {}
    seen: dict = {}
    broken: set = set()
    rejected: set = set()  # paths of files that did not load
    docs: list[Document] = []
    diags: list[Diagnostic] = []
    tool_packages: tuple = ()
    models = None
    for rel in sorted(files):
        if rel.startswith(PROMPTS):  # templates: text, checked by validate (flowctl.check.models)
            continue
        if rel in MODELS_FILES:
            found, problems, doc = load_models(rel, files[rel])
            docs.append(doc)
            diags.extend(problems)
            if found is None:
                rejected.add(rel)
            else:
                models = found
            continue
        if rel in PROJECT_FILES:
            found, problems, doc = _project_file(rel, files[rel])
            docs.append(doc)
            diags.extend(problems)
            if found is not None:
                tool_packages = found
            continue
        parts = rel.split("/")
        if len(parts) != 3 or parts[1] not in FOLDERS or not rel.endswith(EXTENSIONS):
            continue
        kind = FOLDERS[parts[1]]
        stem = parts[2].rsplit(".", 1)[0]
        doc = read_document(rel, files[rel])
        docs.append(doc)
        diags.extend(doc.diagnostics)
        if doc.data is None:
            if not any(d.severity == ERROR for d in doc.diagnostics):  # `---`, `~` or `null` alone
                diags.append(doc.diag("FC010", f"a {kind} file holds one mapping, not null"))
            broken.add((kind, _guess_id(kind, stem)))
            rejected.add(rel)
            continue
        if not isinstance(doc.data, dict):
            diags.append(doc.diag("FC010", f"a {kind} file holds one mapping, not {type(doc.data).__name__}"))
            broken.add((kind, _guess_id(kind, stem)))
            rejected.add(rel)
            continue
        problems = schemas.check(kind, doc)
        element_id = _element_id(kind, doc.data)
        if isinstance(element_id, str):
            expected = element_id if kind != "contract" else f"{element_id}.v{doc.data.get('version')}"
            field_name = {"state": "id", "flow": "flow", "contract": "id", "policy": "policy"}[kind]
            if kind == "contract" and stem != expected and stem.startswith(f"{element_id}.v"):
                problems.append(doc.diag(
                    "FC604", f"file name '{parts[2]}' says version {stem[len(element_id) + 2:]!r} but the file says "
                    f"{doc.data.get('version')!r}", ("version",), hint=_version_hint(doc.data.get("version"), expected)))
            elif stem != expected:
                problems.append(doc.diag(
                    "FC005", f"file name '{parts[2]}' does not match {field_name} '{expected}'",
                    (field_name,), hint=f"rename the file to {expected}.yaml or change the {field_name}"))
            key = (kind, expected)
            if key in seen:
                problems.append(doc.diag("FC006", f"{kind} '{expected}' is also defined in {seen[key]}", (field_name,)))
            seen[key] = rel
        if kind == "state" and isinstance(doc.data.get("type"), str):
            problems.extend(_fields_for_type(doc))
        diags.extend(problems)
        if any(p.severity == ERROR for p in problems):
            broken.add((kind, element_id if isinstance(element_id, str) else _guess_id(kind, stem)))
            broken.add((kind, _guess_id(kind, stem)))  # references by file name (FC005) are not unknown either
            rejected.add(rel)
            continue
        try:
            if kind == "state":
                states[element_id] = _state(doc)
            elif kind == "flow":
                flows[element_id] = _flow(doc)
            elif kind == "contract":
                contracts.setdefault(element_id, []).append(_contract(doc))
            else:
                policies[element_id] = _policy(doc)
        except ValueError as exc:  # a value the schema admits but the model cannot use
            diags.append(doc.diag("FC010", str(exc)))
            broken.add((kind, element_id))
            rejected.add(rel)
    ordered = {k: tuple(sorted(v, key=lambda c: versions.parse_version(c.version))) for k, v in contracts.items()}
    return Project(
        root=Path(root),
        states=MappingProxyType(states),
        flows=MappingProxyType(flows),
        contracts=MappingProxyType(ordered),
        policies=MappingProxyType(policies),
        documents=tuple(docs),
        diagnostics=tuple(diags),
        broken=frozenset(broken),
        files=MappingProxyType(dict(files)),
        tool_packages=tool_packages,
        rejected=frozenset(rejected),
        models=models,
    )


def _project_file(rel: str, data: bytes):
    """``(tool_packages or None, diagnostics, document)`` of ``orchestration/project.yaml``."""
    doc = read_document(rel, data)
    problems = list(doc.diagnostics)
    if doc.data is None or not isinstance(doc.data, dict):
        if not any(d.severity == ERROR for d in problems):
            problems.append(doc.diag("FC010", "the project file holds one mapping"))
        return None, problems, doc
    problems.extend(schemas.check("project", doc))
    if any(p.severity == ERROR for p in problems):
        return None, problems, doc
    from flowctl.definition.toolpath import STDLIB

    packages = tuple(doc.data.get("tool_packages") or ())
    for i, name in enumerate(packages):
        if name in STDLIB:
            problems.append(doc.diag("FC606", f"tool_packages names '{name}', a Python standard library module: "
                                     "it cannot be tool code", ("tool_packages", i),
                                     hint="list only your own installed packages"))
    return tuple(p for p in packages if p not in STDLIB), problems, doc


def _element_id(kind: str, data: dict):
    return data.get({"state": "id", "flow": "flow", "contract": "id", "policy": "policy"}[kind])


def _guess_id(kind: str, stem: str) -> str:
    return stem.split(".v")[0] if kind == "contract" else stem


_SOME_STATE_FIELD = frozenset().union(*STATE_FIELDS.values())


def _fields_for_type(doc: Document) -> list[Diagnostic]:
    allowed = STATE_FIELDS.get(doc.data["type"])
    if allowed is None:
        return []
    out = []
    for key in doc.data:
        if key not in allowed and key not in ("id", "type", "description") and key in _SOME_STATE_FIELD:
            users = sorted(t for t, fields in STATE_FIELDS.items() if key in fields)
            if not users:
                continue  # not a field of any state type: the schema reports it (FC011, did you mean)
            hint = f"'{key}' belongs to {', '.join(users)} states" if users else ""
            out.append(doc.diag("FC012", f"'{key}' has no meaning on a {doc.data['type']} state", (key,),
                                key=True, hint=hint))
    return out


def _seconds(value):
    return None if value is None else parse_duration(value)


def _timeout(value):
    if isinstance(value, dict):
        return dict(value)
    return _seconds(value)


def _retries(doc, data, path):
    out = []
    for i, r in enumerate(data or ()):
        out.append(Retry(doc, path + (i,), tuple(r["errors"]), r.get("max_attempts", 3),
                         _seconds(r.get("interval", "1s")), float(r.get("backoff", 2.0)),
                         _seconds(r.get("max_delay")), r.get("jitter", "none")))
    return tuple(out)


def _handlers(doc, data, path):
    return tuple(Handler(doc, path + (i,), tuple(h["errors"]), h.get("goto"), h.get("fallback"), h.get("fail"),
                         h.get("set"), h.get("compensate")) for i, h in enumerate(data or ()))


_TUPLES = ("decisions", "branches", "messages", "tools")


def _state(doc: Document) -> State:
    d = doc.data
    model, fields = STATE_MODELS.get(d["type"], (State, {}))  # the typed model of its type (model.py)
    typed = {attr: d[key] for attr, key in fields.items() if d.get(key) is not None}
    if any(isinstance(typed.get(k), list) for k in _TUPLES):
        typed.update({k: tuple(typed[k]) for k in _TUPLES if isinstance(typed.get(k), list)})
    return model(doc, (), d["id"], d["type"], d.get("description", ""), d.get("tool"), d.get("input"),
                 d.get("input_schema"), _timeout(d.get("timeout")), _retries(doc, d.get("retry"), ("retry",)),
                 _handlers(doc, d.get("on_error"), ("on_error",)), d, **typed)


def _flow(doc: Document) -> Flow:
    d = doc.data
    lim = d.get("limits") or {}
    limits = Limits(lim.get("max_steps", 1000), lim.get("max_visits"), _seconds(lim.get("timeout")), lim.get("max_depth"),
                    lim.get("tokens"), lim.get("cost"))
    transitions = tuple(
        Transition(doc, ("transitions", i), t["from"], t["to"], t.get("when"), t.get("set"), i)
        for i, t in enumerate(d.get("transitions") or ())
    )
    return Flow(doc, (), d["flow"], d.get("version", 1), d.get("description", ""), d["start"], d.get("input_schema"),
                d.get("params") or {}, d.get("output"), limits, transitions, _handlers(doc, d.get("on_error"), ("on_error",)))


def _contract(doc: Document) -> Contract:
    d = doc.data
    return Contract(doc, (), d["id"], d["version"], d.get("description", ""), d["entrypoint"], d.get("verify"),
                    d.get("compensate"), d.get("reason"), d.get("idempotency_key"), d.get("input_schema"),
                    d.get("output_schema"), tuple(d.get("side_effects") or ()), tuple(d.get("sensitive") or ()),
                    _seconds(d.get("timeout")), bool(d.get("compensate_on_failure", False)), d.get("compensate_retry"),
                    tuple(d.get("examples") or ()), d.get("snapshot"))


def _policy(doc: Document) -> Policy:
    d = doc.data
    checks = []
    for i, c in enumerate(d.get("allow") or ()):
        ops = [k for k in ("equals", "in", "all_in", "range", "regex") if k in c]
        if len(ops) != 1:
            raise ValueError(f"allow[{i}] needs exactly one of equals, in, all_in, range, regex")
        checks.append(Check(doc, ("allow", i), c["field"], ops[0], c[ops[0]], c.get("effect", "deny")))
    rate = d.get("rate")
    if rate:
        rate = {"max": rate["max"], "window": parse_duration(rate["window"]), "per": rate.get("per", "flow")}
    dedupe = d.get("dedupe")
    return Policy(doc, (), d["policy"], d.get("version", 1), d.get("description", ""), tuple(d["applies_to"]),
                  tuple(checks), rate, parse_duration(dedupe["window"]) if dedupe else None, d.get("review_when"),
                  _seconds(d.get("review_timeout")))


def _version_hint(version, expected: str) -> str:
    """FC604's hint: rename the file, unless the version itself is no semver (then fix it first)."""
    if versions.is_version(version):
        return f"rename the file to {expected}.yaml or fix the version"
    return f"the version must be semver, MAJOR.MINOR.PATCH (e.g. 1.0.0), as in the file name; got {version!r}"
