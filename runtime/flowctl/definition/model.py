"""The typed, immutable model of an ``orchestration/`` tree.

:func:`flowctl.load_project` builds a :class:`Project` from the four kinds of file. Every element
keeps the :class:`~flowctl.definition.yamlio.Document` it came from (``doc``) and its ``path`` inside it, so
any check or runtime error can point at ``file:line:column``.

Durations are stored in **seconds** (floats). Expressions are kept as source text; the runtime
compiles them once per definition (:mod:`flowctl.expr.expressions`). Raw JSON-like payloads (input
mappings, JSON Schemas, params) are plain dicts that must be treated as read-only.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from flowctl.definition import versions
from flowctl.definition.yamlio import Document

#: how every model class is declared: a frozen dataclass whose ``==``, ``hash`` and ``repr`` come
#: from :class:`_Value` (one generic method each) instead of three generated per class, which on
#: Python 3.11 are three ``exec`` calls each at import (issue 17's cold start, target 7a)
_model = dataclass(frozen=True, eq=False, repr=False)


class _Value:
    """``==``, ``hash`` and ``repr`` of a model class, as :func:`dataclasses.dataclass` would
    generate them: by the fields with ``compare=True`` (``==`` only between the same class; the
    hash of their tuple, so a model holding a dict is unhashable) and with ``repr=True``."""

    __slots__ = ()

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self):
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{self.__class__.__qualname__}({shown})"


TERMINAL_TYPES = frozenset({"succeed", "fail"})
#: Fields each state type accepts besides id, type and description.
STATE_FIELDS: Mapping[str, frozenset] = MappingProxyType({
    "task": frozenset({"tool", "input", "input_schema", "timeout", "retry", "on_error"}),
    "choice": frozenset({"on_error"}),
    "pass": frozenset({"set", "on_error"}),
    "review": frozenset({"show", "decisions", "notify", "timeout", "remind_after", "on_timeout", "data_schema",
                         "on_error"}),
    "wait": frozenset({"duration", "until", "on_error"}),
    "parallel": frozenset({"branches", "input", "input_schema", "timeout", "retry", "on_error", "max_concurrency",
                           "tolerated_failures", "max_depth"}),
    "map": frozenset({"items", "flow", "item_input", "batch", "max_concurrency", "max_items",
                      "tolerated_failures", "timeout", "retry", "on_error", "max_depth"}),
    "subflow": frozenset({"flow", "input", "input_schema", "timeout", "retry", "on_error", "max_depth"}),
    "llm": frozenset({"model", "prompt", "messages", "output_schema", "max_reasks", "max_output_tokens", "timeout",
                      "retry", "on_error"}),
    "agent": frozenset({"model", "prompt", "messages", "output_schema", "max_reasks", "max_output_tokens", "tools",
                        "max_turns", "max_tool_calls", "timeout", "retry", "on_error"}),
    "succeed": frozenset(),
    "fail": frozenset({"error", "cause", "compensate"}),
})


@_model
class Located(_Value):
    """Mixin: where an element came from. ``doc`` is its file, ``path`` the path inside it."""

    doc: Document = field(repr=False, compare=False)
    path: tuple = field(default=(), repr=False, compare=False)

    @property
    def file(self) -> str:
        return self.doc.file

    def line(self, *sub) -> int:
        return self.doc.at(self.path + tuple(sub))[0]

    def where(self, *sub) -> str:
        line, col = self.doc.at(self.path + tuple(sub))
        return f"{self.doc.file}:{line}:{col}"


@_model
class Retry(Located):
    """One retry rule (layer 1). ``interval``/``max_delay`` in seconds; ``max_delay`` None = no cap."""

    errors: tuple = ()
    max_attempts: int = 3
    interval: float = 1.0
    backoff: float = 2.0
    max_delay: float | None = None
    jitter: str = "none"


@_model
class Handler(Located):
    """An ``on_error`` rule (layer 2 on a state, layer 4 on a flow). First match wins, as in ASL Catch."""

    errors: tuple = ()
    goto: str | None = None
    fallback: str | None = None
    fail: str | None = None
    set: Mapping | None = None
    compensate: bool | None = None


@_model
class State(Located):
    """One state. ``timeout`` is seconds, or ``{"expr": …}`` evaluated at run time, or None."""

    id: str = ""
    type: str = ""
    description: str = ""
    tool: str | None = None
    input: Any = None
    input_schema: Mapping | None = None
    timeout: Any = None
    retry: tuple = ()
    on_error: tuple = ()
    raw: Mapping = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_TYPES

    def get(self, key: str, default=None):
        """Any other field of the state as written (``show``, ``decisions``, ``duration`` …)."""
        return self.raw.get(key, default)


# One typed model per state type (the loader picks it by ``type``): the engine reads these fields,
# never ``raw``. Values are as written (durations as text, expressions as ``{"expr": …}``) unless
# the field says otherwise; ``get`` still answers for tools that read the file's fields by name.
@_model
class TaskState(State):
    """``type: task``: one tool call (``tool``, ``input``, ``timeout``, ``retry``)."""


@_model
class ChoiceState(State):
    """``type: choice``: only its transitions decide."""


@_model
class PassState(State):
    """``type: pass``: ``set`` (a mapping of context paths to expressions), applied on entry."""

    set: Mapping | None = None


@_model
class ReviewState(State):
    """``type: review``. ``review_timeout``: the ``timeout`` as written (a duration text, or
    ``{"expr": …}`` giving seconds); ``remind_after``: a duration text; ``on_timeout``:
    ``{goto: STATE}`` or ``{fail: NAME}`` (None: fail ``ReviewTimeout``); ``data_schema``: the JSON
    Schema every decision's data must satisfy (None: any data; no data is checked as ``{}``)."""

    show: Mapping | None = None
    decisions: tuple = ()
    notify: str | None = None
    review_timeout: Any = None
    remind_after: str | None = None
    on_timeout: Mapping | None = None
    data_schema: Mapping | None = None


@_model
class WaitState(State):
    """``type: wait``: ``duration`` (text such as ``5s``) or ``until`` (an expression giving an ISO-8601 time)."""

    duration: Any = None
    until: str | None = None


@_model
class FanoutState(State):
    """What parallel, map and subflow share: limits on the child runs they start."""

    max_concurrency: int | None = None
    tolerated_failures: Mapping | None = None
    max_depth: int | None = None


@_model
class ParallelState(FanoutState):
    """``type: parallel``: one child run per flow id in ``branches``, each on the same input."""

    branches: tuple = ()


@_model
class MapState(FanoutState):
    """``type: map``: one child run of ``flow`` per item of ``items`` (an expression), or per
    ``batch: {max_items: N}`` items; ``item_input`` maps each item (None: the item itself)."""

    items: str | None = None
    flow: str | None = None
    item_input: Any = None
    batch: Mapping | None = None
    max_items: int | None = None


@_model
class SubflowState(FanoutState):
    """``type: subflow``: one child run of ``flow``."""

    flow: str | None = None


@_model
class LlmState(State):
    """``type: llm``: one model call whose reply must be JSON satisfying ``output_schema``.

    ``model``: a profile of ``orchestration/models.yaml``; ``prompt``: a template path under
    ``orchestration/prompts/`` (sent as the user message); ``messages``: ``({role, content}, …)``,
    each content a template (before the prompt's message); ``max_reasks``: invalid replies sent
    back with the validation error (default 2); ``max_output_tokens``: None = the profile's.
    ``timeout`` (of one model call) and ``retry`` are :class:`State`'s."""

    model: str = "default"
    prompt: str | None = None
    messages: tuple = ()
    output_schema: Mapping | None = None
    max_reasks: int = 2
    max_output_tokens: int | None = None


@_model
class AgentState(LlmState):
    """``type: agent``: a bounded loop in which the model may call the contracts in ``tools`` (refs
    such as ``get_order@^1``) until it answers with JSON satisfying ``output_schema``;
    ``max_turns`` model calls and ``max_tool_calls`` tool calls at most (AgentLimitExceeded)."""

    tools: tuple = ()
    max_turns: int = 8
    max_tool_calls: int = 16


@_model
class SucceedState(State):
    """``type: succeed``: the run ends succeeded with the flow's ``output``."""


@_model
class FailState(State):
    """``type: fail``: ``error`` and ``cause`` (literals or ``{"expr": …}``); ``compensate``: undo first."""

    error: Any = None
    cause: Any = None
    compensate: bool = False


#: the model class of each state type and the fields it reads from the file (``{attribute: key}``)
STATE_MODELS: Mapping[str, tuple] = MappingProxyType({
    "task": (TaskState, {}),
    "choice": (ChoiceState, {}),
    "pass": (PassState, {"set": "set"}),
    "review": (ReviewState, {"show": "show", "decisions": "decisions", "notify": "notify",
                             "review_timeout": "timeout", "remind_after": "remind_after", "on_timeout": "on_timeout",
                             "data_schema": "data_schema"}),
    "wait": (WaitState, {"duration": "duration", "until": "until"}),
    "parallel": (ParallelState, {"branches": "branches", "max_concurrency": "max_concurrency",
                                 "tolerated_failures": "tolerated_failures", "max_depth": "max_depth"}),
    "map": (MapState, {"items": "items", "flow": "flow", "item_input": "item_input", "batch": "batch",
                       "max_concurrency": "max_concurrency", "max_items": "max_items",
                       "tolerated_failures": "tolerated_failures", "max_depth": "max_depth"}),
    "subflow": (SubflowState, {"flow": "flow", "max_depth": "max_depth"}),
    "llm": (LlmState, {"model": "model", "prompt": "prompt", "messages": "messages", "output_schema": "output_schema",
                       "max_reasks": "max_reasks", "max_output_tokens": "max_output_tokens"}),
    "agent": (AgentState, {"model": "model", "prompt": "prompt", "messages": "messages", "output_schema": "output_schema",
                           "max_reasks": "max_reasks", "max_output_tokens": "max_output_tokens", "tools": "tools",
                           "max_turns": "max_turns", "max_tool_calls": "max_tool_calls"}),
    "succeed": (SucceedState, {}),
    "fail": (FailState, {"error": "error", "cause": "cause", "compensate": "compensate"}),
})


@_model
class Transition(Located):
    """A business transition (layer 3). Per state, the first match in file order wins."""

    source: str = ""
    to: str = ""
    when: str | None = None
    set: Mapping | None = None
    index: int = 0


@_model
class Limits(_Value):
    """``max_steps`` (default 1000), ``max_visits`` per state (None: unlimited), ``timeout`` seconds;
    ``tokens`` (input + output) and ``cost`` (by ``models.yaml`` prices) of the run's model calls."""

    max_steps: int = 1000
    max_visits: int | None = None
    timeout: float | None = None
    max_depth: int | None = None
    tokens: int | None = None
    cost: float | None = None


@_model
class Flow(Located):
    id: str = ""
    version: Any = 1
    description: str = ""
    start: str = ""
    input_schema: Mapping | None = None
    params: Mapping = field(default_factory=dict)
    output: Any = None
    limits: Limits = field(default_factory=Limits)
    transitions: tuple = ()
    on_error: tuple = ()

    def transitions_from(self, state_id: str) -> tuple:
        return tuple(t for t in self.transitions if t.source == state_id)

    def named_states(self) -> list[tuple[str, tuple]]:
        """Every state id this file names, with the path of the naming field, in file order."""
        out = [(self.start, ("start",))]
        for t in self.transitions:
            out.append((t.source, t.path + ("from",)))
            out.append((t.to, t.path + ("to",)))
        for h in self.on_error:
            if h.goto:
                out.append((h.goto, h.path + ("goto",)))
        return out


@_model
class Contract(Located):
    """A tool contract. ``timeout`` in seconds (None: the engine default, 30 s)."""

    id: str = ""
    version: str = ""
    description: str = ""
    entrypoint: str = ""
    verify: str | None = None
    compensate: str | None = None
    reason: str | None = None
    idempotency_key: str | None = None
    input_schema: Mapping | None = None
    output_schema: Mapping | None = None
    side_effects: tuple = ()
    sensitive: tuple = ()
    timeout: float | None = None
    compensate_on_failure: bool = False
    compensate_retry: Mapping | None = None
    examples: tuple = ()
    #: ``module:function (input, call) -> dict``: read-only capture of the declared side effects'
    #: state, called before the tool and after verify (both recorded)
    snapshot: str | None = None

    @cached_property  # read on every step: computed once (cached_property writes past frozen=True)
    def side_effecting(self) -> bool:
        return bool(self.side_effects)

    @cached_property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"


@_model
class Check(Located):
    """One ``allow`` check of a policy: ``op`` is equals | in | all_in | range | regex; ``effect``
    what its failure does: ``deny`` (a hard rule, the default), ``warn`` (a soft rule: the call
    proceeds, the decision records the warning) or ``review`` (a human decides first)."""

    field_expr: str = ""
    op: str = ""
    value: Any = None
    effect: str = "deny"


@_model
class Policy(Located):
    """A policy-gate rule set. ``rate.window`` and ``dedupe`` windows are seconds."""

    name: str = ""
    version: Any = 1
    description: str = ""
    applies_to: tuple = ()
    allow: tuple = ()
    rate: Mapping | None = None
    dedupe_window: float | None = None
    review_when: str | None = None
    #: seconds a review_when review waits for a decision (None: the gate's default, 24 h)
    review_timeout: float | None = None


@_model
class ModelProfile(Located):
    """One profile of ``orchestration/models.yaml``: ``provider`` (openai | anthropic | fake),
    ``model`` (the provider's model name; None for fake), ``timeout`` seconds (None: 60 s),
    ``max_output_tokens`` (None: the provider's default; anthropic 1024), ``temperature``,
    ``structured_output`` (None: true for openai, else false) and, for fake, ``replies``
    (``{state id: (reply, …)}``, each reply ``{text | json | tool_calls, usage}``)."""

    name: str = ""
    provider: str = ""
    model: str | None = None
    timeout: float | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    structured_output: bool | None = None
    replies: Mapping = field(default_factory=dict)


@_model
class Models(Located):
    """``orchestration/models.yaml``: ``profiles`` (name -> :class:`ModelProfile`) and ``prices``
    (model name -> ``{input, output}``, each per million tokens)."""

    profiles: Mapping = field(default_factory=dict)
    prices: Mapping = field(default_factory=dict)


@_model
class Project(_Value):
    """Everything under one ``orchestration/`` folder.

    ``states``/``flows``/``policies``: id -> element. ``contracts``: id -> tuple of versions,
    lowest first. ``diagnostics``: what loading found (syntax, schema, ids). ``broken``: ids of
    files that exist but did not load, so references to them are not reported twice.
    ``rejected``: the relative paths of those files (never stored with a run).
    """

    root: Path
    states: Mapping[str, State]
    flows: Mapping[str, Flow]
    contracts: Mapping[str, tuple]
    policies: Mapping[str, Policy]
    documents: tuple = ()
    diagnostics: tuple = ()
    broken: frozenset = frozenset()
    files: Mapping = field(default_factory=dict, repr=False, compare=False)
    #: paths of ``files`` that did not load (errors of their own): left out of :attr:`snapshot`
    rejected: frozenset = frozenset()
    _resolved: dict = field(default_factory=dict, repr=False, compare=False)
    #: installed packages whose functions contracts may name besides orchestration/tools/
    #: (``tool_packages`` of orchestration/project.yaml)
    tool_packages: tuple = ()
    #: ``orchestration/models.yaml`` (None: the project has none)
    models: Models | None = None

    @property
    def orchestration(self) -> Path:
        return self.root / "orchestration"

    def resolve_tool(self, ref: str) -> Contract | None:
        """The contract a ``tool`` reference picks (highest satisfying version), or None."""
        if ref in self._resolved:
            return self._resolved[ref]
        self._resolved[ref] = found = self._resolve(ref)
        return found

    def _resolve(self, ref: str):
        tool_id, constraint = versions.split_ref(ref)
        candidates = self.contracts.get(tool_id, ())
        try:
            chosen = versions.pick([c.version for c in candidates], constraint)
        except ValueError:
            return None
        return next((c for c in candidates if c.version == chosen), None)

    @cached_property
    def snapshot(self) -> dict:
        """The definition snapshot a run keeps: ``files`` without those that did not load
        (``rejected``: syntax, schema or id errors), so a file validate refuses is never stored."""
        return {k: v for k, v in self.files.items() if k not in self.rejected}

    @cached_property
    def _digest(self) -> str:
        return files_digest(self.snapshot)

    def digest(self) -> str:
        """:func:`files_digest` of :attr:`snapshot`: the id of the definition snapshot."""
        return self._digest


def files_digest(files: Mapping) -> str:
    """sha256 over every file's path and the sha256 of its bytes, in path order (hex). A stored
    snapshot is re-hashed with this when it is loaded (:meth:`flowctl.engine.engine.Engine.project_for`)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()
