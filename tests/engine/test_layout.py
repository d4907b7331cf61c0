"""The engine's shape holds: no import circle through the engine or the workers (imports inside
functions counted), no hand-written module over 600 lines, one module per state type in the
handler table, and importing the engine pulls in no CLI module."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import flowctl

PACKAGE = Path(flowctl.__file__).resolve().parent
OURS = ("flowctl.engine", "flowctl.workers", "flowctl.errors")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set) -> set:
    """Every flowctl module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


def _graph() -> dict:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_validators" not in p.parts}
    known = set(files)
    return {name: _imports(path, known) - {name} for name, path in files.items()}


def _cycle_through(graph: dict, start: str):
    """One import path from ``start`` back to itself, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_cycle_finder_sees_a_circle():
    assert _cycle_through({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert _cycle_through({"a": {"b"}, "b": set()}, "a") is None


def test_no_import_circle_runs_through_the_engine_or_the_workers():
    graph = _graph()
    ours = [m for m in graph if m.startswith(OURS) and m not in ("flowctl.engine", "flowctl.workers")]
    assert len(ours) > 20
    circles = [c for c in (_cycle_through(graph, m) for m in sorted(ours)) if c]
    assert circles == []


def test_no_engine_or_worker_module_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in [*PACKAGE.glob("engine/**/*.py"), *PACKAGE.glob("workers/*.py")]
            if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_each_state_type_has_its_own_module_and_table_entry():
    from flowctl.definition.model import STATE_FIELDS, STATE_MODELS
    from flowctl.engine.states import HANDLERS

    assert set(HANDLERS) == set(STATE_FIELDS) == set(STATE_MODELS)
    modules = {fn.__module__.rsplit(".", 1)[1] for fn in HANDLERS.values()}
    assert modules == {"task", "choice", "pass_", "review", "wait", "parallel", "map", "subflow", "terminal"}


def test_importing_the_engine_and_the_worker_pulls_no_cli_module():
    code = ("import json, sys; import flowctl.engine.engine, flowctl.workers.worker; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('flowctl.cli'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
