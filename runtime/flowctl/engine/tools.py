"""Tool registry and invocation: contracts resolved to Python callables, called with a deadline.

Entrypoints (``module:function``) are imported with ``orchestration/tools/`` first on
``sys.path`` (once per process and folder). A tool is ``fn(input: dict, call: ToolCall) -> dict``;
it may also return JSON text (``str``/``bytes``), which the engine parses and keeps raw for the
audit log. ``verify(input, output, call) -> bool`` and ``compensate(input, output, call)``.

Timeouts (seconds): in the main thread a ``SIGALRM`` interrupts the tool where it stands (Python
code and interruptible system calls), sent by the watchdog thread when the deadline passes
(:mod:`flowctl.engine.watchdog`; a ``setitimer`` timer where ``pthread_kill`` is missing); elsewhere the tool runs on the
calling thread's own tool thread (:mod:`flowctl.engine.toolthread`: never queued behind another
caller's tool) and the caller stops waiting at the deadline. Either way :class:`~flowctl.errors.ToolTimeout` is raised
within the timeout plus a few milliseconds — except, off the main thread, for a call that may act on
the world (a side effect, a compensation: ``settle``), whose timeout is raised once it has returned,
so that verify and compensation never run before its effect lands. A thread that is given up on
cannot be killed: its tool should honour ``call.deadline``.
"""
from __future__ import annotations

import importlib
import signal
import sys
import threading
from threading import get_ident
from dataclasses import FrozenInstanceError
from operator import itemgetter

from flowctl.engine import toolthread
from flowctl.engine.watchdog import WATCHDOG
from flowctl.errors import ToolCrashed, ToolTimeout, UsageError  # ToolCrashed: re-exported

DEFAULT_TIMEOUT = 30.0


_CALL_FIELDS = ("run_id", "step", "state", "attempt", "idempotency_key", "deadline", "tool", "trace_context")


class ToolCall(tuple):
    """What a tool is told about its call (read-only: a tool cannot change what the run records).

    ``run_id``; ``step`` (1-based step number of the run); ``state`` id; ``attempt`` (1-based);
    ``idempotency_key`` (the same for every attempt of the step, and after a crash);
    ``deadline`` (epoch seconds by which the call must return, or None); ``tool`` (id@version);
    ``trace_context``: the W3C trace-context headers of the call's OpenTelemetry span
    (``{"traceparent": …}``) for the tool to send on to the systems it calls, or None (tracing off).
    Made on every step, so it is an immutable tuple (``__slots__ = ()``: no instance dict) whose
    fields are read by name; assigning one raises :class:`dataclasses.FrozenInstanceError`.
    """

    __slots__ = ()

    def __new__(cls, run_id: str, step: int, state: str, attempt: int, idempotency_key: str,
                deadline: float | None, tool: str = "", trace_context: dict | None = None):
        return _new(cls, (run_id, step, state, attempt, idempotency_key, deadline, tool, trace_context))

    run_id = property(itemgetter(0))
    step = property(itemgetter(1))
    state = property(itemgetter(2))
    attempt = property(itemgetter(3))
    idempotency_key = property(itemgetter(4))
    deadline = property(itemgetter(5))
    tool = property(itemgetter(6))
    trace_context = property(itemgetter(7))

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field '{name}'")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field '{name}'")

    def __getnewargs__(self):  # pickle and copy: the fields, one by one
        return tuple(self)

    def __repr__(self) -> str:
        return "ToolCall(" + ", ".join(f"{n}={v!r}" for n, v in zip(_CALL_FIELDS, self)) + ")"


_new = tuple.__new__


_cache: dict = {}


def add_tools_path(folder: str) -> None:
    from flowctl.definition.toolpath import TOOL_PATHS

    if folder not in TOOL_PATHS:
        TOOL_PATHS.add(folder)
        if folder not in sys.path:
            sys.path.insert(0, folder)


def resolve(ref: str, tools_folder: str, packages: tuple = ()):
    """The callable named ``module:attr``, from ``tools_folder`` or one of ``packages`` (the
    project's ``tool_packages``) only (see :mod:`flowctl.definition.toolpath`). Raises :class:`UsageError`
    naming what is missing or why the code may not run (``os:system`` and the like)."""
    key = (ref, tools_folder, packages)
    fn = _cache.get(key)
    if fn is not None:
        return fn
    with _import_lock:  # branches resolve on several threads: evict and import exactly once
        fn = _cache.get(key)
        if fn is not None:
            return fn
        return _resolve(ref, tools_folder, key, packages)


_import_lock = threading.RLock()


def _resolve(ref: str, tools_folder: str, key, packages=()):
    from pathlib import Path

    from flowctl.definition.toolpath import HINT, origin_problem, ref_problem

    problem = ref_problem(ref, Path(tools_folder), packages)
    if problem:  # refused before anything is imported
        raise UsageError(f"refused to run {ref}: {problem}", hint=HINT)
    add_tools_path(tools_folder)
    module_name, _, attr = ref.partition(":")
    _evict_foreign(module_name, tools_folder)
    try:
        obj = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import time included
        where = ""
        if isinstance(exc, SyntaxError) and exc.filename:  # the file as a path, not its name alone (new-user finding)
            where = f" at {_shown_path(exc.filename)}:{exc.lineno or 1}:{exc.offset or 1}"
        raise UsageError(f"cannot import tool module '{module_name}' for {ref}{where}: {type(exc).__name__}: {exc}",
                         hint=f"tool code is imported from {tools_folder}; "
                              "flowctl validate --import-check finds this before a run") from None
    module = obj
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"'{module_name}' has no '{attr}' (named by {ref})",
                             hint="flowctl validate --import-check finds this before a run")
    problem = origin_problem(ref, module, obj, tools_folder, packages)
    if problem:
        raise UsageError(f"refused to run {ref}: {problem}", hint=HINT)
    _cache[key] = obj
    return obj


def _evict_foreign(module_name: str, tools_folder: str) -> None:
    """Forget a module of the same name imported from another project's tools folder, so two
    projects used one after the other in one process (tests, a worker) each get their own code."""
    import os

    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if origin is None:
        return
    folder = os.path.realpath(tools_folder)
    if os.path.realpath(origin).startswith(folder + os.sep):
        return
    if os.path.realpath(origin).startswith(os.path.realpath(sys.prefix)):
        return  # an installed package, not project tool code
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()


def _shown_path(filename: str) -> str:
    """``filename`` relative to the current folder when it is under it, else as it is."""
    import os

    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if rel.startswith("..") else rel


class _Deadline(BaseException):
    """Raised inside a tool by the alarm; a BaseException so a tool's ``except Exception`` cannot eat it."""


_armed = False
_previous_handler = None
#: the main thread's deadlines kept by the watchdog thread (flowctl.engine.watchdog), else by setitimer
_WATCHED = hasattr(signal, "pthread_kill") and hasattr(signal, "SIGALRM")


def _on_alarm(signum, frame):
    if WATCHDOG.fired:  # the watchdog's signal: a deadline, unless the call returned meanwhile
        WATCHDOG.fired = False
        if _armed and WATCHDOG.overdue():
            raise _Deadline()
        return
    if _armed and not _WATCHED:
        raise _Deadline()
    if callable(_previous_handler):
        _previous_handler(signum, frame)


_installed = False


def _install_alarm() -> None:
    """Install the SIGALRM handler once (cheaper than swapping it on every call)."""
    global _previous_handler, _installed
    if _installed:
        return
    current = signal.getsignal(signal.SIGALRM)
    if current is not _on_alarm:
        _previous_handler = current
        signal.signal(signal.SIGALRM, _on_alarm)
    _installed = True


MIN_TIMEOUT = 0.001  # seconds; shorter timeouts are raised to this


def call_with_timeout(fn, args: tuple, timeout: float | None, what: str, settle: bool = False):
    """``fn(*args)``, raising :class:`ToolTimeout` after ``timeout`` seconds (None: no limit).
    ``settle``: the call may act on the world (a side effect, a compensation); off the main thread,
    where it cannot be interrupted, :class:`ToolTimeout` is then raised only once it has returned
    (:func:`flowctl.engine.toolthread.call`), so no verify or compensation runs before its effect.

    Whatever the code raises that is not an ``Exception`` (``SystemExit`` …) becomes
    :class:`ToolCrashed`, except ``KeyboardInterrupt``, which stops the process as it should (the
    run stays resumable).
    """
    global _armed
    try:
        if _WATCHED and timeout and timeout > 0 and not _armed and get_ident() == threading.main_thread().ident:
            # the common case, inlined (it runs on every tool call): the watchdog keeps the deadline
            if timeout < MIN_TIMEOUT:
                timeout = MIN_TIMEOUT
            if not _installed:
                _install_alarm()
            try:
                _armed = True
                WATCHDOG.arm(timeout)
                return fn(*args)
            except _Deadline:
                raise ToolTimeout(f"{what} did not return within {timeout:g}s") from None
            finally:
                WATCHDOG.deadline = None  # WATCHDOG.disarm()
                _armed = False
        return _call(fn, args, timeout, what, settle)
    except (Exception, KeyboardInterrupt, _Deadline):  # _Deadline: an outer tool's, met in a nested call
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit, GeneratorExit, custom BaseExceptions
        crashed = ToolCrashed(type(exc).__name__, f"{what} raised {type(exc).__name__}: {exc}")
        crashed.flowctl_names = [type(exc).__name__, "ToolCrashed", "ToolError"]
        raise crashed from None


def _call(fn, args, timeout, what, settle=False):
    if not timeout or timeout <= 0:
        return fn(*args)
    if timeout < MIN_TIMEOUT:
        timeout = MIN_TIMEOUT
    global _armed
    if _WATCHED and not _armed and get_ident() == threading.main_thread().ident:
        if not _installed:
            _install_alarm()
        try:
            _armed = True
            WATCHDOG.arm(timeout)
            return fn(*args)
        except _Deadline:
            raise ToolTimeout(f"{what} did not return within {timeout:g}s") from None
        finally:
            WATCHDOG.deadline = None  # WATCHDOG.disarm(), inlined: this runs on every tool call
            _armed = False
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer") and not _armed:
        _install_alarm()
        try:
            _armed = True
            signal.setitimer(signal.ITIMER_REAL, timeout)
            return fn(*args)
        except _Deadline:
            raise ToolTimeout(f"{what} did not return within {timeout:g}s") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _armed = False
    try:  # another thread: on the caller's tool thread (flowctl.engine.toolthread), never queued
        return toolthread.call(fn, args, timeout, settle)
    except toolthread.TimedOut:
        raise ToolTimeout(f"{what} did not return within {timeout:g}s") from None
