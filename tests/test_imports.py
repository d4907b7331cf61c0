"""Import hygiene (like click's test_imports.py): validating a valid project stays light, and the
package's modules form no import circle.

`flowctl validate` on a valid project must not import the engine's or the graph's heavy
dependencies, nor jsonschema (the generated fast validators accept valid files; jsonschema only
loads to explain an invalid one).

The module graph is read from the source (:func:`import_graph`): every ``import`` and ``from …
import`` under ``runtime/flowctl``, at the top of a module and inside functions alike, since an
import moved into a function still closes a circle — it only hides it until run time.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.helpers import MINIMAL

HEAVY = ("sqlalchemy", "networkx", "jsonschema", "rich", "graphviz", "cryptography", "jinja2", "openai", "anthropic",
         "httpx", "httpx2")

SCRIPT = """
import json, sys
import flowctl.cli.main
from click.testing import CliRunner

result = CliRunner().invoke(flowctl.cli.main.main, ["validate", sys.argv[1]])
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"exit": result.exit_code, "output": result.output, "loaded": loaded}))
"""


def validate_in_fresh_interpreter(root):
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(root), json.dumps(HEAVY)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_importing_the_cli_is_light():
    code = "import json, sys; import flowctl.cli.main; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout))
    assert "flowctl" in loaded
    assert not loaded & set(HEAVY)


def test_validating_a_valid_project_imports_no_heavy_module(make_project):
    root = make_project({
        **MINIMAL,
        "states/begin.yaml": "id: begin\ntype: task\ntool: pay@^1\ninput: {x: input.x}\ntimeout: 3s\n",
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: m:u\n"
                                     "side_effects:\n  - {type: database_write, target: t}\n",
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow:\n  - {field: input.x, in: [1]}\n",
    })
    found = validate_in_fresh_interpreter(root)
    assert found["exit"] == 0, found["output"]
    assert "no problems found" in found["output"]
    assert found["loaded"] == []


def test_an_invalid_file_does_load_jsonschema_to_explain_itself(make_project):
    # the control for the test above: the probe does see modules when they are imported
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescriptoin: x\n"})
    found = validate_in_fresh_interpreter(root)
    assert found["exit"] == 1
    assert "FC011" in found["output"]
    assert "jsonschema" in found["loaded"]
    assert not set(found["loaded"]) & {"sqlalchemy", "networkx", "rich", "graphviz", "cryptography"}


@pytest.mark.parametrize("module", ["flowctl", "flowctl.cli.main", "flowctl.check.checks", "flowctl.definition.loader", "flowctl.check.render"])
def test_modules_import_without_the_heavy_dependencies(module):
    code = f"import json, sys; import {module}; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not set(json.loads(r.stdout)) & set(HEAVY)


def test_flowctl_validate_stays_the_function_after_the_engine_ran(tmp_path):
    import flowctl
    from flowctl.store.sql import MemoryStore
    from support.helpers import MINIMAL, write_project

    project = flowctl.load_project(write_project(tmp_path / "p", MINIMAL))
    flowctl.Engine(project, MemoryStore()).run("flow", {})  # check=True imports the checks module
    assert callable(flowctl.validate) and flowctl.validate(project) == []


# ------------------------------------------------------------------------------ the module graph
PACKAGE = Path(__file__).resolve().parents[1] / "runtime" / "flowctl"
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_files() -> dict:
    """``{dotted module name: Path}`` of every module of the package."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known) -> list:
    """``[(imported module, line)]`` for every import statement in the file, wherever it stands;
    ``from pkg import x`` names ``pkg.x`` when that is a module, else ``pkg``; relative imports are
    resolved against ``name``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:
                full = f"{module}.{alias.name}"
                out.append((full if full in known else module, node.lineno))
    return out


def import_graph() -> dict:
    """``{module: {module it imports: first line}}``, flowctl modules only."""
    files = module_files()
    graph: dict = {}
    for name, path in files.items():
        edges = graph.setdefault(name, {})
        for target, line in imports_of(name, path, files):
            if target in files and target != name:
                edges.setdefault(target, line)
    return graph


def circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's, without recursion),
    each a sorted list; an import circle is one of them."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, todo = work[-1]
            for nxt in todo:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe(graph: dict, component) -> str:
    members = set(component)
    return "; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in sorted(members) for b in sorted(graph[a])
                     if b in members)


def test_the_graph_reader_sees_imports_inside_functions_and_relative_ones(tmp_path):
    # the control for the circle tests: a circle hidden in a function, written relatively, is found
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from . import sibling\n    from .pkg.mod import x\n")
    known = {"flowctl.check.sibling", "flowctl.check.pkg.mod"}
    found = imports_of("flowctl.check.m", source, known)
    assert ("os", 1) in found and ("flowctl.check.sibling", 4) in found and ("flowctl.check.pkg.mod", 5) in found
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles: " + " | ".join(describe(graph, c) for c in found)


#: What each package may import (besides itself and the root vocabulary, ``flowctl.errors`` and
#: ``flowctl.diagnostics``): the layers of docs/architecture.md, lowest first. A package that needs
#: one more is a design change: change this table and that page together.
LAYERS = {
    "definition": set(),
    "expr": {"definition"},
    "check": {"definition", "expr"},
    "graph": {"definition", "check"},
    "diff": {"definition", "check", "graph"},
    "store": set(),
    "scaffold": set(),
    "telemetry": set(),
    "gate": {"definition", "expr", "store"},
    "models": {"definition"},
    "engine": {"definition", "expr", "check", "store", "gate", "models", "telemetry"},
    "workers": {"definition", "engine", "store"},
    "testing": {"definition", "expr", "check", "store", "gate", "engine", "models"},
    "server": {"definition", "expr", "check", "graph", "store", "gate", "engine", "workers", "testing", "models",
               "telemetry"},
    "cli": {"definition", "expr", "check", "graph", "diff", "store", "gate", "engine", "workers", "testing", "scaffold",
            "server", "models", "telemetry"},
}
ROOT = {"flowctl", "errors", "diagnostics"}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "flowctl"


def test_each_package_imports_only_the_layers_below_it():
    graph = import_graph()
    assert set(LAYERS) | ROOT >= {_package(m) for m in graph}, "a package missing from LAYERS"
    found = []
    for module, edges in graph.items():
        src = _package(module)
        for target, line in edges.items():
            dst = _package(target)
            if dst != src and dst not in ROOT and dst not in LAYERS.get(src, set()):
                found.append(f"{module} -> {target} (line {line})")
    assert not found, "imports across the layers: " + "; ".join(sorted(found))


def test_the_root_vocabulary_imports_no_layer():
    graph = import_graph()
    found = [f"{m} -> {t}" for m in ("flowctl.errors", "flowctl.diagnostics") for t in graph.get(m, ())]
    assert not found, found


def test_library_code_never_imports_the_cli():
    graph = import_graph()
    found = [f"{a} -> {b} (line {line})" for a, edges in graph.items() if not a.startswith("flowctl.cli")
             for b, line in edges.items() if b == "flowctl.cli" or b.startswith("flowctl.cli.")]
    assert not found, found


@pytest.mark.parametrize("module", ["flowctl.engine", "flowctl.engine.engine", "flowctl.workers.worker",
                                    "flowctl.testing.runner", "flowctl.testing.replay"])
def test_importing_the_library_loads_no_cli_module(module):
    code = (f"import json, sys; import {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m == 'flowctl.cli' or m.startswith('flowctl.cli.'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def _hand_written(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        first = f.readline()
    return not (first.startswith("# Generated by") and "do not edit" in first)


def _sizes():
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if _hand_written(p))


@pytest.mark.parametrize("rel", _sizes())
def test_no_hand_written_module_exceeds_the_limit(rel):
    lines = len((PACKAGE / rel).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{rel} has {lines} lines (at most {MAX_LINES}): split it by concept"


def test_generated_modules_are_told_apart_by_their_header():
    generated = [p for p in PACKAGE.rglob("*.py") if not _hand_written(p)]
    assert generated and all("_validators" in p.parts for p in generated)
