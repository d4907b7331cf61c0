"""The ``tool_resolver`` built from a case's ``mocks``: every tool call is answered by the case.

:class:`MockTools` plugs into :class:`flowctl.Engine` (``tool_resolver=mocks.resolve``) and
answers all three kinds of call of a contract:

* ``entrypoint`` — the case's entry for that tool id: first an entry whose ``when`` holds on
  ``{input: <tool input>, call: {state, attempt, step, n}}`` (``n`` counts this tool's calls from 1),
  else the next entry in call order (each used ``times`` times; a tool mocked with one mapping
  answers every call). ``output`` is returned; ``error: TypeName`` raises :func:`make_error`.
* ``verify`` — the entry's ``verified`` (default: true for an output, false for an error), and
  false once the call was compensated.
* ``compensate`` — records the tool id in :attr:`MockTools.compensated`.

A tool the case does not mock, or a list of entries that runs out, raises :class:`MockProblem`
and remembers it (:attr:`MockTools.problem`, with the number of events recorded by then): whether
the engine lets it through or treats it as a crashed tool, the case reports what was missing, not
the path the flow's handlers took afterwards.
"""
from __future__ import annotations

import builtins
import copy
import json
from functools import partial

from flowctl.errors import StepError, ToolError


class MockProblem(BaseException):
    """The case cannot answer a tool call (no mock, mocks used up, a broken ``when``)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def make_error(name: str, message: str | None = None) -> BaseException:
    """The exception a mocked ``error: name`` raises.

    A flowctl error class (``ToolTimeout``, ``ToolUnavailable``, ``SchemaMismatch`` …) or a Python
    built-in exception (``ConnectionError``, ``KeyError`` …) of that name is raised as such, so
    handlers match it and its base classes as they would the real thing; any other name is a
    ``ToolError(name, message)`` — how tools name their own errors (``Payments.CardDeclined``).
    """
    from flowctl import errors

    text = message or f"mocked {name}"
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, StepError) and name != "FlowFailed":
        if cls is ToolError:
            return ToolError("ToolError", text)
        return cls(text)
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and not name.startswith("_"):
        try:
            return cls(text)
        except TypeError:  # an exception class with a different constructor (UnicodeDecodeError …)
            pass
    return ToolError(name, text)


class MockTools:
    def __init__(self, mocks: dict, seen: list | None = None):
        self.mocks = mocks                    # tool id -> [MockEntry]
        self.seen = seen                      # the run's events so far (the engine's listener fills it)
        self.problem: MockProblem | None = None
        self.problem_steps: int | None = None  # how many events the run had recorded when it arose
        self.used: dict = {}                  # (tool, entry index) -> times used
        self.counts: dict = {}                # tool id -> calls so far
        self.calls: list = []                 # [{tool, state, attempt, input, entry}]
        self.compensated: list = []           # tool ids, in the order they were undone
        self._answered: dict = {}             # (tool, idempotency key) -> entry
        self._undone: set = set()

    def resolve(self, contract, kind: str):
        """The engine's ``tool_resolver`` hook: never None, so no real tool is imported."""
        if kind == "entrypoint":
            return partial(self._invoke, contract)
        if kind == "verify":
            return partial(self._verify, contract)
        if kind == "compensate":
            return partial(self._compensate, contract)
        if kind == "snapshot":  # the real one reads the real systems: a test records that it was mocked
            return lambda tool_input, call: {"mocked": True}
        return None

    # ------------------------------------------------------------------------------ the calls
    def _invoke(self, contract, tool_input, call):
        try:
            entry = self.pick(contract, tool_input, call)
        except MockProblem as exc:
            if self.problem is None:
                self.problem = exc
                if self.seen is not None:
                    self.problem_steps = len(self.seen)  # the events recorded before it
            raise
        self._answered[(contract.id, getattr(call, "idempotency_key", None))] = entry
        if entry.error:
            raise make_error(entry.error, entry.message)
        return copy.deepcopy(entry.output)

    def _verify(self, contract, tool_input, output, call):
        key = (contract.id, getattr(call, "idempotency_key", None))
        if key in self._undone:
            return False
        entry = self._answered.get(key)
        return bool(entry.verified) if entry is not None else False

    def _compensate(self, contract, tool_input, output, call):
        self.compensated.append(contract.id)
        self._undone.add((contract.id, getattr(call, "idempotency_key", None)))

    # ------------------------------------------------------------------------------ choosing
    def pick(self, contract, tool_input, call):
        tool = contract.id
        n = self.counts[tool] = self.counts.get(tool, 0) + 1
        state = getattr(call, "state", "?")
        entries = self.mocks.get(tool)
        if not entries:
            raise MockProblem(f"the run called {contract.ref} in state '{state}' but the case has no mock for "
                              f"'{tool}' (input {_short(tool_input)})",
                              hint=f"add to the case: mocks: {{{tool}: [{{output: {{...}}}}]}}")
        scope = {"input": tool_input,
                 "call": {"state": state, "attempt": getattr(call, "attempt", 1), "step": getattr(call, "step", None),
                          "n": n}}
        chosen = None
        for i, e in enumerate(entries):
            if e.when is None:
                continue
            if _holds(e, scope):
                chosen = (i, e)
                break
        if chosen is None:
            for i, e in enumerate(entries):
                if e.when is not None:
                    continue
                if e.repeat:
                    chosen = (i, e)
                    break
                if self.used.get((tool, i), 0) < e.times:
                    chosen = (i, e)
                    break
        if chosen is None:
            ordered = sum(e.times for e in entries if e.when is None)
            why = (f"its {ordered} mocked call{'s are' if ordered != 1 else ' is'} used up (in call order)" if ordered
                   else "no entry's when holds")
            raise MockProblem(f"call {n} of {tool} (state '{state}', attempt {scope['call']['attempt']}, "
                              f"input {_short(tool_input)}): {why}",
                              hint=f"add an entry to mocks.{tool} (or `times: N` to repeat one)")
        i, entry = chosen
        self.used[(tool, i)] = self.used.get((tool, i), 0) + 1
        self.calls.append({"tool": tool, "state": state, "attempt": scope["call"]["attempt"], "input": tool_input,
                           "entry": entry.label})
        return entry


def _holds(entry, scope) -> bool:
    from flowctl.expr.expressions import compile_expr
    from flowctl.expr.compile import truthy

    try:
        return truthy(compile_expr(entry.when, entry.where).evaluate(scope))
    except Exception as exc:  # noqa: BLE001 - a broken `when` is the case's fault, not the flow's
        raise MockProblem(f"{entry.where}: {entry.label}.when {entry.when!r} failed: {exc}") from None


def _short(value, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


__all__ = ["MockTools", "MockProblem", "make_error"]
