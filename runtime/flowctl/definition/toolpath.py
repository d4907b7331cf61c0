"""Where tool code may come from: ``orchestration/tools/`` and the packages a project lists.

A contract's ``entrypoint``, ``verify`` and ``compensate`` (``module:attr``) name code the engine
runs with the run's data. They resolve only to modules in the project's ``orchestration/tools/``
folder, or to the installed packages listed in ``orchestration/project.yaml``::

    tool_packages: [shop_payments]      # top-level package names

Refused, by ``validate`` (FC606) and again when the engine resolves the function:

- a module of the standard library or a builtin module (``os:system``, ``builtins:eval``,
  ``subprocess:run``) — listing one in ``tool_packages`` is itself refused — and any other
  installed package not listed;
- a module in ``orchestration/tools/`` that has a standard library name (the standard library
  module is what Python imports);
- an attribute path with a part starting with ``_`` (``shop:__builtins__``, ``m:_private``);
- code of ``orchestration/tools/`` when that folder, or anything under it (a module, a package, a
  file of a package), is a symbolic link resolving outside the repository: tool code comes from the
  repository only, as definition files do (FC008);
- at run time, a resolved object defined outside the allowed modules (``tools_mod:os.system``
  reaches ``os.system`` through a module attribute; its ``__module__`` says ``posix``).

Cheap: the static check imports nothing (``importlib.machinery.PathFinder`` only looks for files).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

#: the tools folders flowctl has put on ``sys.path`` (:func:`flowctl.engine.tools.add_tools_path`): a
#: module found there is the project's own, not an installed one
TOOL_PATHS: set = set()

STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(sys.builtin_module_names)

HINT = ("tool code lives in orchestration/tools/; to use an installed package, list it in "
        "orchestration/project.yaml as tool_packages: [name]")


def _in_tools(top: str, tools_dir: Path) -> bool:
    return (tools_dir / f"{top}.py").is_file() or (tools_dir / top).is_dir()


def outside_repository(tools_dir: Path) -> tuple | None:
    """``(relative path, where it leads)`` of the first of ``tools_dir`` (``<repo>/orchestration/tools``)
    and the entries under it that resolve outside the repository, or None. Imports nothing; does
    not follow links while walking (a link is checked, not entered)."""
    tools_dir = Path(tools_dir).absolute()
    repo = os.path.realpath(tools_dir.parent.parent)
    prefix = repo.rstrip(os.sep) + os.sep

    def leaves(path) -> str | None:
        real = os.path.realpath(path)
        return None if real == repo or real.startswith(prefix) else real

    for path in (tools_dir.parent, tools_dir):
        target = leaves(path)
        if target is not None:
            return os.path.relpath(path, tools_dir.parent.parent), target
    for folder, dirs, names in os.walk(tools_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in dirs + sorted(names):
            path = os.path.join(folder, name)
            if os.path.islink(path):
                target = leaves(path)
                if target is not None:
                    return os.path.relpath(path, tools_dir.parent.parent), target
    return None


def ref_problem(ref: str, tools_dir: Path, packages=()) -> str | None:
    """Why ``ref`` (``module:attr``) may not name tool code, or None. Imports nothing."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        return f"{ref!r} is not module:function"
    private = [p for p in attr.split(".") + module.split(".")[1:] if p.startswith("_")]
    if private:
        return f"{ref} names {private[0]!r}: private and dunder names cannot be tool code"
    top = module.split(".")[0]
    if top in packages and top not in STDLIB:
        return None
    if top in STDLIB:
        if _in_tools(top, tools_dir):
            return (f"orchestration/tools/{top} has the name of the standard library module '{top}', "
                    "which Python imports instead: rename it")
        return f"{module} is a Python standard library module, not tool code: {ref} would run it with the run's data"
    if _in_tools(top, tools_dir):
        found = outside_repository(tools_dir)
        if found:
            return (f"{found[0]} is a link to {found[1]}, outside the repository: tool code is run only "
                    "from the repository")
        return None
    from importlib.machinery import PathFinder

    skip = {os.path.realpath(p) for p in TOOL_PATHS} | {os.path.realpath(tools_dir)}
    search = [p for p in sys.path if os.path.realpath(p or ".") not in skip]
    spec = PathFinder.find_spec(top, search)
    if spec is not None:
        where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
        return (f"{module} is an installed package or other module outside orchestration/tools/ ({where}), "
                "not listed in tool_packages")
    return None  # not found anywhere: --import-check (FC603) says so


def origin_problem(ref: str, module, obj, tools_dir: str, packages=()) -> str | None:
    """Why the imported ``module`` and resolved ``obj`` of ``ref`` may not run, or None."""
    static = ref_problem(ref, Path(tools_dir), packages)
    if static:
        return static
    top = ref.partition(":")[0].split(".")[0]
    if top in packages:  # not a standard library name: ref_problem said so
        allowed = (top,)
    else:
        origin = getattr(module, "__file__", None)
        folder = os.path.realpath(tools_dir)
        if origin is None or not os.path.realpath(origin).startswith(folder + os.sep):
            return f"{ref} resolved to {origin or 'a module with no file'}, outside {tools_dir}"
        allowed = _tools_modules(folder) + tuple(packages)
    defined_in = getattr(obj, "__module__", None)
    if defined_in is None and not callable(obj):
        return None  # data of a tools module (the engine calls only callables)
    if not isinstance(defined_in, str) or defined_in.split(".")[0] not in allowed:
        return (f"{ref} is {getattr(obj, '__qualname__', type(obj).__name__)} from module "
                f"'{defined_in}', not code of orchestration/tools/ or tool_packages")
    return None


def _tools_modules(folder: str) -> tuple:
    """Top-level module names defined by files in the tools folder."""
    try:
        names = os.listdir(folder)
    except OSError:
        return ()
    return tuple(n[:-3] if n.endswith(".py") else n for n in names)


def function_key(obj) -> tuple:
    """What makes two imported callables the same function, for the gate: a bound method
    (``module:svc.send`` re-exported as ``other:svc.send``) is a new object on every attribute
    access, so it is its function and its instance; anything else is itself. Keep ``obj`` alive
    while the key is used (ids are reused after collection)."""
    func, owner = getattr(obj, "__func__", None), getattr(obj, "__self__", None)
    if func is not None and owner is not None:
        return ("method", id(func), id(owner))
    return ("object", id(obj))
