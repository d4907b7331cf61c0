"""FC608: the function a contract names exists in its ``orchestration/tools/`` module, read without
importing it (and FC603 when that module does not even parse).

``entrypoint: shop_tools.payments:refund_paymnt`` fails only when the run calls it, and
``--import-check`` (FC603) finds it only by running the tools' top-level code. This check reads the
module's source instead: it looks for ``tools/shop_tools/payments.py`` (or ``…/payments/__init__.py``),
parses it with :mod:`ast`, and reports a name the module does not define at its top level (a
``def``, ``class``, assignment or import, also inside a top-level ``if``/``try``/``with``), with the
nearest defined name as the hint. A module that can make names at run time (a module ``__getattr__``,
``from … import *``, ``globals()``) is not judged; nor are installed ``tool_packages`` (FC603 checks
those). Only the first part of a dotted attribute (``svc`` of ``svc.send``) is checked.
"""
from __future__ import annotations

import ast
from difflib import get_close_matches
from pathlib import Path

from flowctl.check.gate import HELPERS
from flowctl.definition.model import Project

_DYNAMIC = ("__getattr__", "import *", "globals()")


def check_tool_names(project: Project):
    """FC608 at each contract's ``entrypoint``/``verify``/``compensate``/``snapshot`` naming a module of
    ``orchestration/tools/`` that is missing or does not define the name."""
    tools = project.orchestration / "tools"
    modules: dict = {}
    told: set = set()  # modules whose syntax error was reported: once, at the first reference to them
    for found in project.contracts.values():
        for c in found:
            for key in ("entrypoint",) + HELPERS:
                ref = getattr(c, key, None)
                if not ref or ref == "none" or ":" not in ref:
                    continue
                problem = ref_name_problem(ref, tools, modules)
                if problem:
                    code, message, hint = problem
                    if code == "FC603":  # the module's syntax error: once, however many contracts name it
                        if message in told:
                            continue
                        told.add(message)
                    yield c.doc.diag(code, f"{key} {ref}: {message}", (key,), hint=hint)


def ref_name_problem(ref: str, tools: Path, cache: dict | None = None) -> tuple | None:
    """``(code, message, hint)`` when ``ref`` (``module:attr``) names a module under ``tools`` that is missing
    or does not define ``attr``'s first part; None when it does, or when this cannot be told without
    importing (a module outside ``tools``, a module that makes names at run time). A module with a
    syntax error is a problem of its own (FC603: it cannot be imported; else the code is FC608).
    ``cache`` maps a module name to its defined names, None, or
    ``("syntax", message)``."""
    module, _, attr = ref.partition(":")
    parts = module.split(".")
    if not parts[0] or not ((tools / f"{parts[0]}.py").is_file() or (tools / parts[0]).is_dir()):
        return None
    cache = {} if cache is None else cache
    if module not in cache:
        cache[module] = _defined_names(tools, parts)
    names = cache[module]
    if names is None:
        return None
    if isinstance(names, tuple):  # ("syntax", where and what): no run could import it (new-user finding)
        return ("FC603", f"the module does not compile: {names[1]}",
                "fix the tool code; flowctl run would refuse this flow (flowctl validate --import-check also runs "
                "the modules' top-level code)")
    if names == "missing":
        where = "/".join(parts)
        return ("FC608", f"orchestration/tools has no module '{module}' (looked for {where}.py and {where}/__init__.py)",
                "check the module path before the ':'")
    name = attr.split(".")[0]
    if name in names:
        return None
    close = get_close_matches(name, sorted(names), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"define {name} in the module, or fix the name after the ':'"
    return "FC608", f"module '{module}' defines no '{name}'", hint


def _defined_names(tools: Path, parts: list):
    """The top-level names the module's source defines; "missing" when no file holds it;
    ``("syntax", "file:line:col: what")`` when it does not parse; None when the source cannot be
    judged (it makes names at run time, or cannot be read)."""
    base = tools.joinpath(*parts)
    for path in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if path.is_file():
            break
    else:
        return None if base.is_dir() else "missing"  # a namespace package: nothing to read
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        shown = "/".join(["orchestration", "tools", *path.relative_to(tools).parts])
        return "syntax", f"{shown}:{exc.lineno or 1}:{exc.offset or 1}: {exc.msg}"
    except (OSError, UnicodeError, ValueError):
        return None
    if any(marker in source for marker in _DYNAMIC):
        return None
    names: set = set()
    _collect(tree.body, names)
    if base.is_dir():  # a package: its submodules are attributes once imported
        names.update(p.stem for p in base.glob("*.py"))
        names.update(p.name for p in base.iterdir() if (p / "__init__.py").is_file())
    return names


def _collect(body, names: set) -> None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody"):
                _collect(getattr(node, field, []) or [], names)
            for handler in getattr(node, "handlers", []) or []:
                _collect(handler.body, names)
