"""Rows of the run store as Python values: statuses, JSON columns, run ids, the lease error.

Shared by :mod:`flowctl.store.core` (the SQL store), :mod:`flowctl.store.memory`,
:mod:`flowctl.store.queue` and :mod:`flowctl.store.hot`; imports neither SQLAlchemy nor any of them.
"""
from __future__ import annotations

import json

from flowctl.errors import LeaseLost, RunConflict, RunNotFound, StoreError  # noqa: F401 - LeaseLost: records.LeaseLost
from flowctl.store.keyring import PREFIX as SEALED_PREFIX, Sealed


#: A run's ``status``; the last three are final.
STATUSES = ("queued", "running", "waiting", "paused", "succeeded", "failed", "cancelled")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
#: Run columns that hold JSON text.
JSON_RUN = ("input", "params", "output", "error", "cursor", "cancel_requested")
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
    return None if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_CURSOR = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)  # written every step: no sorting


def dump_run_field(key, value):
    """A run column's stored text: the checkpoint (``cursor``) unsorted, the others by :func:`dumps`."""
    if value is None:
        return None
    if value.__class__ is Sealed:
        return str(value)
    return _CURSOR.encode(value) if key == "cursor" else dumps(value)


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
        raise RunNotFound(f"'{run_id[:70]}' is not a run id", hint="run ids are letters, digits, '.', '_' and '-'; "
                          "list runs with: flowctl runs")


def prefix_bounds(prefix: str) -> tuple:
    """``(low, high)``: the ids that start with ``prefix`` are exactly those with ``low <= id <
    high`` in code-point (binary) order, so a prefix lookup is an index range, not a ``LIKE`` scan."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)
