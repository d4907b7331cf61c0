"""Rows of the run store as Python values: statuses, JSON columns, run ids, the lease error.

Shared by :mod:`flowctl.store.core` (the SQL store), :mod:`flowctl.store.memory`,
:mod:`flowctl.store.queue`, :mod:`flowctl.store.hot` and :mod:`flowctl.store.reader`; imports
neither SQLAlchemy nor any of them (of the store, only :mod:`flowctl.store.audit`, the format of
packed rows).
"""
from __future__ import annotations

import json

from flowctl.store.audit import unpack, utf8_safe
from flowctl.errors import LeaseLost, RunConflict, RunNotFound, StoreError  # noqa: F401 - LeaseLost: records.LeaseLost
from flowctl.store.keyring import PREFIX as SEALED_PREFIX, Sealed


#: A run's ``status``; the last three are final.
STATUSES = ("queued", "running", "waiting", "paused", "succeeded", "failed", "cancelled")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
#: Run columns that hold JSON text.
JSON_RUN = ("input", "params", "output", "error", "cursor", "cancel_requested", "pause_requested")
#: Step-record columns that hold JSON text.
JSON_STEP = ("input", "output")
#: Run fields that are sealed while the run needs them (:mod:`flowctl.engine.sensitive`).
SEALABLE = ("input", "params", "cursor", "output")
EVENT_COLUMNS = ("seq", "ts", "type", "state", "attempt", "prev_hash", "hash")
#: The characters of a run id (at most 64 of them).
RUN_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-")


def dumps(v):
    """JSON text of a column value (keys sorted; a :class:`Sealed` value as it is; None as NULL)."""
    if v.__class__ is Sealed:  # encrypted already (flowctl.store.keyring): stored as it is
        return str(v)
    return None if v is None else utf8_safe(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                                       default=str))


_CURSOR = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)  # written every step: no sorting


def dump_run_field(key, value):
    """A run column's stored text: the checkpoint (``cursor``) unsorted, the others by :func:`dumps`."""
    if value is None:
        return None
    if value.__class__ is Sealed:
        return str(value)
    return utf8_safe(_CURSOR.encode(value)) if key == "cursor" else dumps(value)


def loads(v):
    return None if v is None else json.loads(v)


def event_dict(r) -> dict:
    """An event row as ``{run_id, seq, ts, type, state, attempt, data, data_json, prev_hash, hash,
    fence}`` (``data`` parsed; ``{"corrupt": True}`` when its text is not JSON)."""
    try:
        data = loads(r["data"])
    except ValueError:
        data = {"corrupt": True}  # audit verify reports it (the hash no longer matches)
    return dict(r, data=data, data_json=r["data"])


def event_row(run_id: str, e: dict, fence=None) -> dict:
    """The ``flowctl_events`` row of an engine event (``data_json`` written as is when present)."""
    row = {k: e.get(k) for k in EVENT_COLUMNS}
    row["run_id"] = run_id
    row["fence"] = fence
    row["data"] = e["data_json"] if e.get("data_json") is not None else dumps(e.get("data"))
    return row


#: The columns of a stored event row, in the order of :func:`event_rows`' tuples.
EVENT_ROW = ("run_id", "seq", "ts", "type", "state", "attempt", "data", "prev_hash", "hash", "fence", "n_events")
#: ``type`` of a packed row (schema 7): one row holding a whole commit's events
#: (:func:`flowctl.store.audit.seal_commit`); no event has this type.
PACKED = "packed"


def step_row(run_id: str, step: dict) -> dict:
    """A step record (``step_no``, ``attempt``, ``state``, ``tool``, ``status``, ``input`` …) as the
    ``flowctl_steps`` row it sets: ``run_id`` first, the JSON columns (:data:`JSON_STEP`) as text."""
    row = {"run_id": run_id}
    row.update((k, dumps(v) if k in JSON_STEP else v) for k, v in step.items() if k != "run_id")
    return row


def event_rows(run_id: str, events, fence=None) -> list:
    """The ``flowctl_events`` rows (tuples in :data:`EVENT_ROW` order) of one commit's ``events``:
    one packed row when :func:`~flowctl.store.audit.seal_commit` sealed them (``seq``, ``ts`` and
    ``state`` of its last event, the packed text as ``data``, ``n_events`` events in it), else
    one row per event (``n_events`` NULL), as stores before schema 7 wrote them."""
    if not events:
        return []
    last = events[-1]
    text = last.get("packed_json")
    if text is not None:
        return [(run_id, last["seq"], last["ts"], PACKED, last.get("state"), None, text, last["prev_hash"],
                 last["hash"], fence, len(events))]
    return [(run_id, e["seq"], e["ts"], e["type"], e.get("state"), e.get("attempt"),
             e["data_json"] if e.get("data_json") is not None else dumps(e.get("data")), e["prev_hash"], e["hash"],
             fence, None) for e in events]


def packed_row_differs(ts, typ, state, attempt, last: dict) -> dict:
    """The indexed columns of a packed row that are not what :func:`event_rows` writes for the
    hashed events in it (``ts`` and ``state`` of its ``last`` event, ``type`` :data:`PACKED`,
    ``attempt`` NULL), as ``{column: (stored, expected)}``; empty when they agree. Readers put it
    on the row's last event as ``row_differs`` (:class:`flowctl.store.audit.ChainCheck` reports it)."""
    expected = {"ts": last["ts"], "type": PACKED, "state": last["state"], "attempt": None}
    stored = {"ts": ts, "type": typ, "state": state, "attempt": attempt}
    return {k: (stored[k], v) for k, v in expected.items() if stored[k] != v}


def stored_events(run_id: str, row: tuple, after_seq: int = 0) -> list:
    """The events (dicts as :meth:`flowctl.store.protocol.Store.events` gives them) of one stored
    row ``(seq, ts, type, state, attempt, data, prev_hash, hash, fence, n_events)`` with ``seq >
    after_seq``. A packed row whose text is not what flowctl wrote gives one event of type
    ``packed`` with ``data`` ``{"corrupt": True}`` (``audit verify`` reports it). The events' fields
    are the hashed ones (from the packed text); when the row's own ``ts``, ``type``, ``state`` or
    ``attempt`` columns disagree with them (edited in the store), its last event carries
    ``row_differs`` (:func:`packed_row_differs`)."""
    seq, ts, typ, state, attempt, text, prev, digest, fence, n = row
    if n is None:
        try:
            data = json.loads(text) if text is not None else None
        except ValueError:
            data = {"corrupt": True}  # audit verify reports it (the hash no longer matches)
        return [{"run_id": run_id, "seq": seq, "ts": ts, "type": typ, "state": state, "attempt": attempt,
                 "data": data, "prev_hash": prev, "hash": digest, "fence": fence, "data_json": text}]
    events = unpack(text, prev, digest, seq)
    if events is None or len(events) != n:
        return [{"run_id": run_id, "seq": seq, "ts": ts, "type": typ, "state": state, "attempt": attempt,
                 "data": {"corrupt": True}, "prev_hash": prev, "hash": digest, "fence": fence, "data_json": None,
                 "packed": [seq, seq]}]
    last = events[-1]
    if ts != last["ts"] or typ != PACKED or state != last["state"] or attempt is not None:
        last["row_differs"] = packed_row_differs(ts, typ, state, attempt, last)
    out = []
    for ev in events:
        if ev["seq"] > after_seq:
            ev["run_id"] = run_id
            ev["fence"] = fence
            out.append(ev)
    return out


def review_due(run: dict):
    """A paused review's due time (``available_at``): its reminder (``remind_after``) if not sent
    yet, else its deadline. A worker's claim finds a review to remind or to time out exactly as it
    finds a wait that is due."""
    if run.get("status") != "paused" or run.get("available_at") is not None:
        return None
    cursor = run.get("cursor")
    return review_due_at((getattr(cursor, "plain", cursor) or {}).get("pending") or {})


def review_due_at(pending: dict):
    """When a pending review next needs a worker: its unsent reminder, else its deadline (or None)."""
    if pending.get("kind") != "review":
        return None
    times = [pending.get("deadline")]
    if pending.get("remind_at") and not pending.get("reminded"):
        times.append(pending["remind_at"])
    times = [t for t in times if t is not None]
    return min(times) if times else None


def run_dict(row, store=None) -> dict:
    """A run row as a dict with its JSON columns parsed; with ``store``, sealed fields are opened
    with its keyring. Raises :class:`StoreError` for a corrupt row."""
    row = dict(row)
    if store is not None:
        for k in SEALABLE:
            v = row.get(k)
            if v is not None and v.startswith(SEALED_PREFIX):
                row[k] = store.keyring(create=False).open(v, f"{row.get('id')}/{k}")
    try:
        out = {k: (loads(v) if k in JSON_RUN else v) for k, v in row.items()}
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run {row.get('id')} has a corrupt record in the store ({exc})",
                         hint="restore the store from a backup; flowctl audit verify RUN checks its events") from None
    if "cursor" in out and not isinstance(out["cursor"], dict):
        raise StoreError(f"run {row.get('id')} has a corrupt checkpoint in the store",
                         hint="restore the store from a backup")
    return out


def check_run_id(run_id: str) -> None:
    """Raise :class:`RunNotFound` unless ``run_id`` could be a run id (or a prefix of one)."""
    if not run_id or len(run_id) > 64 or not set(run_id) <= RUN_ID_CHARS:
        why = (f"it is {len(run_id)} characters long; a run id has at most 64" if run_id and len(run_id) > 64
               else "run ids are letters, digits, '.', '_' and '-'")
        raise RunNotFound(f"'{run_id[:70]}' is not a run id", hint=f"{why}; list runs with: flowctl runs")


def prefix_bounds(prefix: str) -> tuple:
    """``(low, high)``: the ids that start with ``prefix`` are exactly those with ``low <= id <
    high`` in code-point (binary) order, so a prefix lookup is an index range, not a ``LIKE`` scan."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)
