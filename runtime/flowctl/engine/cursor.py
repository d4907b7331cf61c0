"""The run's checkpoint, typed: :class:`Cursor` reads the ``cursor`` JSON of a run row and writes it back.

The JSON (stored on the run row, rewritten by every commit) is an object with these keys, in this
order; the last four are written only once set, and keys this engine does not know are kept::

    state, entered, step, attempt, visits, path, context, response, error, review,
    saga: [{run_id, state, step, tool, input, output, idempotency_key, at}],   # completed side effects
    residue: [{state, tool, error, idempotency_key}],                          # compensations that failed
    inflight: {step, attempt, state, tool, input, idempotency_key} | None,     # a call not yet recorded
    pending: {kind: retry|wait|review|children, state, ...} | None,           # why the run is parked
    after_compensation: {goto|fallback|fail, compensate, ...} | None,          # a handler's action
    state_info: {id, entered_at, attempt} | None, done,
    fanout: {state, visit, count, max_concurrency, tolerated, depth, batched, ids, digest | inputs,
             next, reserved, open, ended, kept, queued?, failed?} | None,   # fanout.plan: O(1) per child
    depth, parent: {state, index} | None,
    secrets: {fields, values},                                                 # a sensitive run only
    gate_granted: [step, contract, digest, "fallback"?], path_dropped, cancelling: {by, compensate}

Who writes what: the step loop (state, entered, step, attempt, visits, path, path_dropped,
state_info, response, error, done), the error layers (after_compensation), the task state and its
tool calls (inflight, saga, residue, gate_granted), reviews and waits (pending, review), fan-out
(fanout), start (depth, parent), cancel (cancelling), :mod:`flowctl.engine.sensitive` (secrets).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: keys written on every commit, in stored order
ALWAYS = ("state", "entered", "step", "attempt", "visits", "path", "context", "response", "error", "review",
          "saga", "residue", "inflight", "pending", "after_compensation", "state_info", "done",
          "fanout", "depth", "parent")
#: keys written only when not None (absent from checkpoints that never set them)
WHEN_SET = ("secrets", "gate_granted", "path_dropped", "cancelling")
_KNOWN = frozenset(ALWAYS + WHEN_SET)


@dataclass(slots=True)
class Cursor:
    """One run's position and data between steps. ``step``: states entered so far; ``attempt``:
    calls of the current state (1-based); ``visits``: ``{state id: times entered}``; ``path``: the
    last :data:`~flowctl.engine.loop.PATH_KEPT` state ids (``path_dropped`` counts the ones cut);
    ``extra``: keys of a stored checkpoint this engine does not know, written back unchanged."""

    state: str = ""
    entered: bool = False
    step: int = 0
    attempt: int = 1
    visits: dict = field(default_factory=dict)
    path: list = field(default_factory=list)
    context: Any = field(default_factory=dict)
    response: Any = None
    error: dict | None = None
    review: dict | None = None
    saga: list = field(default_factory=list)
    residue: list = field(default_factory=list)
    inflight: dict | None = None
    pending: dict | None = None
    after_compensation: dict | None = None
    state_info: dict | None = None
    done: bool = False
    fanout: dict | None = None
    depth: int = 0
    parent: dict | None = None
    secrets: dict | None = None
    gate_granted: list | None = None
    path_dropped: int | None = None
    cancelling: dict | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> "Cursor":
        """The cursor of a stored checkpoint (a dict as decoded from the row). Missing keys take
        their defaults; unknown ones go to ``extra``. The values are taken, not copied. Raises
        :class:`~flowctl.errors.RecordTampered` for a checkpoint this engine never writes (not an
        object, or a known key of the wrong type): nothing may continue from it."""
        problem = checkpoint_problem(data)
        if problem:
            from flowctl.errors import RecordTampered

            raise RecordTampered(f"the run's checkpoint is not one flowctl writes: {problem}; it is not continued",
                                 hint="flowctl audit verify RUN says what else differs; restore the store from a backup")
        known = {k: v for k, v in data.items() if k in _KNOWN}
        cursor = cls(**known)
        if len(known) != len(data):
            cursor.extra = {k: v for k, v in data.items() if k not in _KNOWN}
        return cursor

    def to_json(self) -> dict:
        """The checkpoint as stored: a dict in :data:`ALWAYS` order, then the :data:`WHEN_SET` keys
        that are set, then ``extra``. Values are shared with the cursor, not copied."""
        out = {"state": self.state, "entered": self.entered, "step": self.step, "attempt": self.attempt,
               "visits": self.visits, "path": self.path, "context": self.context, "response": self.response,
               "error": self.error, "review": self.review, "saga": self.saga, "residue": self.residue,
               "inflight": self.inflight, "pending": self.pending, "after_compensation": self.after_compensation,
               "state_info": self.state_info, "done": self.done, "fanout": self.fanout, "depth": self.depth,
               "parent": self.parent}
        if self.secrets is not None:
            out["secrets"] = self.secrets
        if self.gate_granted is not None:
            out["gate_granted"] = self.gate_granted
        if self.path_dropped is not None:
            out["path_dropped"] = self.path_dropped
        if self.cancelling is not None:
            out["cancelling"] = self.cancelling
        if self.extra:
            out.update(self.extra)
        return out


__all__ = ["Cursor", "ALWAYS", "WHEN_SET"]


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: ``{key: (check, what it must be)}`` for every known key (None is allowed where the key may be unset)
_TYPES = {
    "state": (lambda v: isinstance(v, str), "a state id"),
    "entered": (lambda v: isinstance(v, bool), "true or false"),
    "done": (lambda v: isinstance(v, bool), "true or false"),
    "step": (_int, "an integer"),
    "attempt": (_int, "an integer"),
    "depth": (_int, "an integer"),
    "visits": (lambda v: isinstance(v, dict) and all(_int(n) for n in v.values()), "an object of counts"),
    "path": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of state ids"),
    "saga": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
    "residue": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
    "path_dropped": (lambda v: v is None or _int(v), "an integer"),
    "gate_granted": (lambda v: v is None or isinstance(v, list), "a list"),
    **{k: (lambda v: v is None or isinstance(v, dict), "an object or null")
       for k in ("error", "review", "inflight", "pending", "after_compensation", "state_info", "fanout", "parent",
                 "secrets", "cancelling")},
}


def checkpoint_problem(data) -> str | None:
    """Why ``data`` is no checkpoint this engine writes (not an object; a known key of the wrong
    type), or None. ``context``, ``response`` and unknown keys may hold any JSON."""
    if not isinstance(data, dict):
        return f"it is {type(data).__name__}, not an object"
    for key, (ok, what) in _TYPES.items():
        if key in data and not ok(data[key]):
            return f"{key} is {data[key]!r:.60}, not {what}"
    return None
