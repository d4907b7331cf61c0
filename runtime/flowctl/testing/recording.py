"""A recorded run, as replay reads it (:mod:`flowctl.testing.replay`): its row and audit events
(:class:`Recording`, with the recordings of its child runs), and :class:`RecordedTools`, which
serves the recorded tool outcomes per tool id in call order, raising :class:`ReplayStop` where
the new definition asks for something the recording does not have.

Fields a contract marks ``sensitive`` are redacted in the audit log, so their recorded values are
lost: a redacted output field is replayed with the run input's value of the same name when that
fits the output schema, else with a value the schema accepts, and the result says so.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from flowctl.testing.mocks import make_error


class ReplayStop(BaseException):
    """The new definition asks for something the recording does not have. Remembered by
    :class:`RecordedTools` (``stop``), so the replay stops there whether or not the engine lets
    the exception through."""


@dataclass
class Recording:
    row: dict
    events: list
    path: list
    outcomes: dict        # tool id -> [outcome]
    reviews: list         # [{decision, data, by} | {timeout: True}]
    values: list          # [{kind: uuid|now, value}]
    #: the recorded child runs (parallel, map, subflow): ``(state, index) -> [Recording]``, oldest first
    children: dict = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.row["id"]


def recording(row: dict, events: list) -> Recording:
    outcomes: dict = {}
    reviews: list = []
    values: list = []
    pending = None
    for ev in events:
        t, d = ev["type"], ev.get("data") or {}
        if t == "tool_invoked":
            pending = {"state": ev.get("state"), "tool": d.get("tool"), "input": d.get("input"),
                       "attempt": ev.get("attempt"), "purpose": d.get("purpose")}
        elif t in ("tool_succeeded", "tool_failed") and pending is not None:
            out = dict(pending)
            if t == "tool_succeeded":
                out["output"] = d.get("output")
            else:
                out["error"], out["message"] = d.get("error"), d.get("message")
            outcomes.setdefault(_tool_id(pending["tool"]), []).append(out)
            pending = None
        elif t == "verify_failed" and pending is not None and pending["tool"] == d.get("tool"):
            out = dict(pending, boundary=True)
            outcomes.setdefault(_tool_id(pending["tool"]), []).append(out)
            pending = None
        elif t == "review_decided":
            reviews.append({"decision": d.get("decision"), "data": d.get("data"), "by": d.get("by")})
        elif t == "review_timed_out":
            reviews.append({"timeout": True})
        elif t == "transition_taken":
            values.extend(d.get("recorded") or ())
    path = [e["state"] for e in events if e["type"] == "state_entered"]
    return Recording(row, events, path, outcomes, reviews, values)


def load_recording(store, run_id: str) -> Recording:
    """The recording of ``run_id`` with those of its child runs, at any depth. Raises
    :class:`~flowctl.errors.UsageError` for a run without events, :class:`RunNotFound`."""
    from flowctl.errors import UsageError

    row = store.get_run(run_id)
    events = store.events(row["id"])
    if not events:
        raise UsageError(f"run {row['id']} has no audit events to replay")
    return load_children(store, recording(row, events))


def load_children(store, rec: Recording, depth: int = 0) -> Recording:
    """Attach the recordings of ``rec``'s child runs (and theirs) to ``rec.children``."""
    if depth > 32:
        return rec
    kids = sorted(store.list_runs(parent_id=rec.row["id"], limit=0), key=lambda r: (r["created_at"], r["id"]))
    for kid in kids:
        where = (kid.get("cursor") or {}).get("parent") or {}
        child = load_children(store, recording(kid, store.events(kid["id"])), depth + 1)
        rec.children.setdefault((where.get("state"), where.get("index")), []).append(child)
    return rec


def _tool_id(ref) -> str:
    return str(ref or "").split("@")[0]


class RecordedTools:
    """A ``tool_resolver`` serving a recording's outcomes per tool id, in call order."""

    def __init__(self, rec: Recording, sensitive=frozenset(), seen: list | None = None):
        import threading

        self.seen = seen
        self.stop: ReplayStop | None = None
        self.stop_steps: int | None = None   # events recorded before the stop
        self.stop_run: str | None = None     # the run it stopped in
        self.root = rec
        #: replayed run id -> its recording (None: the recorded run had no such child); the root
        #: replays under its recorded id, a child is matched by parent, state, index and order
        self.runs: dict = {rec.run_id: rec}
        self.run_queues: dict = {rec.run_id: {tool: list(items) for tool, items in rec.outcomes.items()}}
        self.children: list = []             # [(replayed id, recording or None, replayed parent id, (state, index))]
        self.store = None                    # the replay's store (set by replay()): where child rows are read
        self.run_input = rec.row.get("input")
        self.sensitive = sensitive
        self.notes: list = []
        self._answered: dict = {}
        self._undone: set = set()
        self._taken: dict = {}
        self._lock = threading.RLock()

    @property
    def queues(self) -> dict:
        """The root run's outcomes still to serve, per tool id."""
        return self.run_queues[self.root.run_id]

    def recording_of(self, run_id: str):
        """The recording a replayed run follows (None for a child the recorded run did not have)."""
        with self._lock:
            if run_id in self.runs:
                return self.runs[run_id]
            rec = None
            row = self.store.get_run(run_id) if self.store is not None else {}
            parent_id = row.get("parent_id")
            where = (row.get("cursor") or {}).get("parent") or {}
            key = (where.get("state"), where.get("index"))
            parent = self.recording_of(parent_id) if parent_id else None
            if parent is not None:
                n = self._taken.get((parent_id, key), 0)
                self._taken[(parent_id, key)] = n + 1
                kids = parent.children.get(key) or []
                rec = kids[n] if n < len(kids) else None
            self.runs[run_id] = rec
            self.run_queues[run_id] = {tool: list(items) for tool, items in rec.outcomes.items()} if rec else {}
            self.children.append((run_id, rec, parent_id, key))
            return rec

    def resolve(self, contract, kind):
        if kind == "entrypoint":
            return lambda tool_input, call: self._invoke(contract, tool_input, call)
        if kind == "verify":
            return lambda tool_input, output, call: self._verify(contract, call)
        if kind == "compensate":
            return lambda tool_input, output, call: self._undone.add((contract.id, call.idempotency_key))
        if kind == "snapshot":  # never the real systems: the recording holds the snapshots taken then
            return lambda tool_input, call: {"replayed": True}
        return None

    def _invoke(self, contract, tool_input, call):
        from flowctl.store.audit import redact

        rec = self.recording_of(call.run_id)
        queue = self.run_queues.get(call.run_id, {}).get(contract.id) or []
        if not queue:
            if rec is None:
                stop = ReplayStop(f"'{call.state}' calls {contract.id} in a child run that the recorded run did not have")
            else:
                whose = "the recorded run" if rec is self.root else f"the recorded child run {rec.run_id}"
                stop = ReplayStop(f"'{call.state}' calls {contract.id}, but {whose} has no further "
                                  f"{contract.id} call to take its outcome from")
            if self.stop is None:
                self.stop, self.stop_run = stop, call.run_id
                if self.seen is not None:
                    self.stop_steps = len(self.seen)  # the events recorded before it
            raise stop
        outcome = queue.pop(0)
        shown = redact(tool_input, self.sensitive)
        if outcome.get("input") is not None and outcome["input"] != shown and outcome.get("purpose") != "notify":
            self.notes.append(f"'{call.state}' calls {contract.id} with another input than recorded "
                              f"(at '{outcome['state']}'): {_input_change(outcome['input'], shown)}")
        self._answered[(contract.id, call.idempotency_key)] = outcome
        if outcome.get("boundary"):
            from flowctl.errors import BoundaryViolation

            raise BoundaryViolation(f"verify of {contract.ref} said the effect did not happen (recorded)")
        if outcome.get("error"):
            raise make_error(outcome["error"], outcome.get("message"))
        output = copy.deepcopy(outcome.get("output"))
        return self._unredact(output, contract, call.state, rec.row.get("input") if rec else self.run_input)

    def _verify(self, contract, call):
        key = (contract.id, call.idempotency_key)
        return key not in self._undone and key in self._answered

    def _unredact(self, output, contract, state, run_input=None):
        out, replaced = unredact(output, contract.output_schema, run_input if run_input is not None else self.run_input)
        if replaced:
            self.notes.append(f"'{state}': sensitive field{'s' * (len(replaced) != 1)} {', '.join(replaced)} of "
                              f"{contract.id} {'are' if len(replaced) != 1 else 'is'} redacted in the audit log; "
                              "replayed with a stand-in value")
        return out


def unredact(value, schema, run_input=None) -> tuple:
    """``(value, [dotted paths replaced])``: ``value`` with each redacted leaf that ``schema`` (a
    JSON Schema, at that place) rejects replaced by a stand-in (:func:`_stand_in`: the run input's
    value of the same name when the schema takes it, else a sample of the schema)."""
    from flowctl.store.audit import REDACTED

    replaced = []

    def walk(v, sub, path):
        if isinstance(v, dict):
            props = (sub or {}).get("properties") or {} if isinstance(sub, dict) else {}
            return {k: walk(x, props.get(k), path + [k]) for k, x in v.items()}
        if isinstance(v, list):
            items = sub.get("items") if isinstance(sub, dict) else None
            return [walk(x, items, path) for x in v]
        if v == REDACTED:
            found = _stand_in(path[-1] if path else "", sub, run_input)
            if found != REDACTED:
                replaced.append(".".join(path))
            return found
        return v

    return walk(value, schema, []), replaced


def _stand_in(name, schema, run_input):
    from flowctl.store.audit import REDACTED
    from flowctl.definition.runtime_schemas import check_instance
    from flowctl.testing.suggest import sample

    for candidate in _values_named(run_input, name):
        if not schema or check_instance(schema, candidate) is None:
            return copy.deepcopy(candidate)
    if not schema or check_instance(schema, REDACTED) is None:
        return REDACTED
    return sample(schema)


def _values_named(value, name):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == name:
                yield v
            yield from _values_named(v, name)
    elif isinstance(value, list):
        for v in value:
            yield from _values_named(v, name)


def _input_change(before, after) -> str:
    if isinstance(before, dict) and isinstance(after, dict):
        changes = [f"{k}: {before.get(k)!r} → {after.get(k)!r}" for k in sorted(set(before) | set(after))
                   if before.get(k) != after.get(k)]
        return "; ".join(changes[:4]) + (" …" if len(changes) > 4 else "")
    return f"{before!r} → {after!r}"
