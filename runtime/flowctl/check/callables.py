"""``--import-check`` (FC603): import every tool function a contract names and check it can be
called the way the engine calls it. Runs tool modules' top-level code, so it is opt-in."""
from __future__ import annotations

import importlib
import sys

from flowctl.check.gate import import_gated_helpers, import_same_function
from flowctl.definition.model import Project


def import_check(project: Project):
    """FC603: import every entrypoint/verify/compensate (``--import-check``), with
    ``orchestration/tools/`` first on ``sys.path``. Runs tool modules' top-level code."""
    tools = str(project.orchestration / "tools")
    added = tools not in sys.path
    if added:
        sys.path.insert(0, tools)
    try:
        for found in project.contracts.values():
            for c in found:
                for key in ("entrypoint", "verify", "compensate", "snapshot"):
                    ref = getattr(c, key)
                    if not ref or ref == "none":
                        continue
                    problem = resolve_callable_problem(ref, _CALLED_WITH[key])
                    if problem:
                        yield c.doc.diag("FC603", f"{key} {ref}: {problem}", (key,),
                                         hint=f"tool code is imported from {project.orchestration / 'tools'}")
        yield from import_same_function(project, _imported)
        yield from import_gated_helpers(project, _imported)
    finally:
        if added:
            sys.path.remove(tools)


def _imported(ref: str):
    """The object ``module:attr`` names once imported (import_check already imported it), or None."""
    module_name, _, attr = ref.partition(":")
    obj = sys.modules.get(module_name)
    for part in attr.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
    return obj if callable(obj) else None


#: How the engine calls each kind of tool function (tools.py, task.py, saga.py).
_CALLED_WITH = {"entrypoint": ("input", "call"), "verify": ("input", "output", "call"),
                "compensate": ("input", "output", "call"), "snapshot": ("input", "call")}


def resolve_callable_problem(ref: str, called_with: tuple = ()):
    """Why ``module:attr`` cannot be called as ``fn(*called_with)``, or None."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any import failure is the finding, sys.exit() included
        return f"cannot import module '{module_name}' ({type(exc).__name__}: {exc})"
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return f"module '{module_name}' has no '{attr}'"
    if not callable(obj):
        return f"'{attr}' is not callable"
    if called_with:
        import inspect

        try:
            signature = inspect.signature(obj)
            signature.bind(*called_with)
        except TypeError as exc:  # Python's words ("too many positional arguments") speak of the call
            n = len(called_with)
            return (f"'{attr}{signature}' cannot take the {n} positional arguments flowctl calls it with, "
                    f"{attr}({', '.join(called_with)}) ({exc})")
        except ValueError:
            pass  # no signature to read (some builtins): calling it will tell
    return None


