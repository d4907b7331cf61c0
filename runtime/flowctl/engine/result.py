"""What a caller gets back: :class:`RunResult` (from a run's live state or its stored row)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from flowctl.errors import FlowctlError
from flowctl.store.sql import FINAL

EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 1, "paused": 3, "waiting": 3, "running": 3}


@dataclass
class RunResult:
    """How a run stands after ``run``/``resume``.

    ``status``: succeeded | failed | cancelled | paused | waiting. ``output``: the flow's
    ``output`` (succeeded). ``error``: ``{type, code, message, state}`` (failed). ``path``: state
    ids entered, in order: the last 32 of a longer run (``steps`` counts them all; ``flowctl
    trace`` shows all).
    ``residue``: compensations that failed, ``[{state, tool, error}]``.
    ``review``: when paused, ``{state, token, decisions, show, deadline}`` (the token is only
    here, never stored). ``available_at``: when waiting, epoch seconds it is due.
    """

    run_id: str
    flow: str
    status: str
    output: Any = None
    error: dict | None = None
    path: list = field(default_factory=list)
    residue: list = field(default_factory=list)
    review: dict | None = None
    available_at: float | None = None
    steps: int = 0
    #: ``cancel`` of a run a live worker holds: the request is recorded; that worker cancels it
    cancel_requested: bool = False
    #: when waiting on its child runs: ``[{run_id, flow, status, review, available_at, children}]``
    #: of those not finished (``review`` as above, its token where this process issued it)
    children: list = field(default_factory=list)
    #: paused by an operator (flowctl.engine.pause): ``{state, by, reason}``; None otherwise
    paused_by: dict | None = None

    @property
    def exit_code(self) -> int:
        """0 succeeded, 1 failed or cancelled, 3 paused or waiting."""
        return EXIT_CODES.get(self.status, 1)


def new_run_id(clock) -> str:
    """Time-ordered id: 12 hex digits of milliseconds then 12 random hex digits."""
    return f"{int(clock.time() * 1000):012x}{uuid.uuid4().hex[:12]}"


def result_from_row(row) -> RunResult:
    """The :class:`RunResult` of a stored run row (no review token: only hashes are stored)."""
    cursor = row.get("cursor") or {}
    return RunResult(row["id"], row["flow"], row["status"], row.get("output"), row.get("error"),
                     list(cursor.get("path", [])), list(cursor.get("residue", [])), None,
                     row.get("available_at"), cursor.get("step", 0))


def pending_review(pending: dict, token: str | None) -> dict:
    """``RunResult.review`` of a run paused for review: ``{state, decisions, show, deadline, token}``."""
    review = {k: pending.get(k) for k in ("state", "decisions", "show", "deadline")}
    review["token"] = token
    return review


def waiting_children(store, known: dict, pending: dict) -> list:
    """The unfinished children a parent waits on (``pending``: its ``{kind: children, children:
    [ids]}``), as :attr:`RunResult.children`: from ``known`` (``{run id: RunResult}`` this process
    drove; a review token it issued is only there, never stored), else from ``store`` (no token:
    ``flowctl reviews --reissue CHILD`` makes one)."""
    out = []
    for run_id in pending.get("children") or ():
        r = known.get(run_id)
        if r is not None and r.status == "paused" and not (r.review or {}).get("token"):
            r = None  # resumed here without a decision: the store says what it waits for
        if r is None:
            try:
                row = store.get_run(run_id, exact=True)
            except FlowctlError:
                continue
            wait = (row.get("cursor") or {}).get("pending") or {}
            review = None
            if row["status"] == "paused" and wait.get("kind") == "review":
                review = pending_review(wait, None)
            r = {"run_id": row["id"], "flow": row["flow"], "status": row["status"], "review": review,
                 "available_at": row.get("available_at"),
                 "children": waiting_children(store, known, wait) if wait.get("kind") == "children" else []}
        else:
            r = {"run_id": r.run_id, "flow": r.flow, "status": r.status, "review": r.review,
                 "available_at": r.available_at, "children": r.children}
        if r["status"] not in FINAL:
            out.append(r)
    return out


__all__ = ["RunResult", "EXIT_CODES", "new_run_id", "result_from_row", "waiting_children"]
