"""What ``flowctl serve`` shows of a run: never a sensitive value, never a token or a checkpoint.

A run row's ``input``, ``params`` and ``output`` are opened by the store (a live sensitive run keeps
them sealed at rest, :mod:`flowctl.engine.sensitive`), so every view redacts them again with the
same :class:`~flowctl.engine.sensitive.Secrets` the engine redacts events with: by name (the fields
the contracts of the run's flow mark ``sensitive``, and those the run's checkpoint kept) and by
value (every value the checkpoint knows as a secret). Events are stored redacted already and are
redacted again the same way. The checkpoint itself (``cursor``) is never shown; of a pending
review only its state, decisions, ``show`` data (redacted), deadline and whether a policy asked.
"""
from __future__ import annotations

from flowctl.engine.sensitive import Secrets, flow_fields


def secrets_of(project, row) -> Secrets:
    """The redaction for one run: its flow's sensitive fields plus what its checkpoint kept."""
    flow = project.flows.get(row.get("flow") or "")
    fields = set(flow_fields(project, flow)) if flow is not None else set()
    cursor = row.get("cursor") if isinstance(row.get("cursor"), dict) else {}
    s = Secrets(fields)
    s.absorb(cursor.get("secrets"))
    s.learn(row.get("input"))
    s.learn(row.get("params"))
    return s


def _error(s: Secrets, error):
    if not isinstance(error, dict):
        return None
    return s.scrub({k: error.get(k) for k in ("type", "code", "message", "state", "attempt") if k in error})


def summary(project, row, s: Secrets | None = None) -> dict:
    s = s or secrets_of(project, row)
    return {"id": row["id"], "flow": row["flow"], "flow_version": row.get("flow_version"), "status": row["status"],
            "steps": row.get("steps") or 0, "created_at": row["created_at"], "updated_at": row["updated_at"],
            "parent_id": row.get("parent_id"), "queue": row.get("queue"), "error": _error(s, row.get("error"))}


def pending(s: Secrets, cursor) -> dict | None:
    p = (cursor or {}).get("pending") if isinstance(cursor, dict) else None
    if not isinstance(p, dict) or p.get("kind") != "review":
        return None
    return {"state": p.get("state"), "decisions": list(p.get("decisions") or ()), "show": s.scrub(p.get("show")),
            "deadline": p.get("deadline"), "policy": bool(p.get("policy"))}


def detail(project, row) -> dict:
    s = secrets_of(project, row)
    out = summary(project, row, s)
    out.update(input=s.scrub(row.get("input")), params=s.scrub(row.get("params")), output=s.scrub(row.get("output")),
               available_at=row.get("available_at"),
               review=pending(s, row.get("cursor")) if row["status"] == "paused" else None)
    return out


def event(s: Secrets, ev) -> dict:
    data = ev.get("data")
    return {"seq": ev["seq"], "ts": ev["ts"], "type": ev["type"], "state": ev.get("state"),
            "attempt": ev.get("attempt"), "data": s.scrub(data) if isinstance(data, (dict, list)) else data,
            "hash": ev["hash"]}


def review_item(project, row) -> dict | None:
    s = secrets_of(project, row)
    p = pending(s, row.get("cursor"))
    if p is None:
        return None
    return dict(p, run_id=row["id"], flow=row["flow"], parent_id=row.get("parent_id"))


def stored(store, result):
    """The run row of ``result`` as stored now (None when it cannot be read): what a view of a
    result just returned by the engine redacts with, and takes the error and output from."""
    from flowctl.errors import FlowctlError

    try:
        row = store.get_run(result.run_id, exact=True)
    except FlowctlError:
        return None
    return row if row.get("status") == result.status else None


def outcome(project, result, store=None) -> dict:
    """A :class:`~flowctl.engine.result.RunResult` as the API returns it: no review token. The
    result holds what the engine had in memory (an error message quoting a secret, in plaintext):
    with ``store``, the error and residue are the stored ones (redacted by value) and everything is redacted with
    the run's own :func:`secrets_of`; without, by name only."""
    row = stored(store, result) if store is not None else None
    if row is not None:
        s = secrets_of(project, row)
        error = row.get("error")
        residue = (row.get("cursor") or {}).get("residue") if isinstance(row.get("cursor"), dict) else None
    else:
        s = Secrets(flow_fields(project, project.flows[result.flow]) if result.flow in project.flows else ())
        error, residue = result.error, None
    residue = result.residue if residue is None else residue
    review = None
    if result.review:
        r = result.review
        review = {"state": r.get("state"), "decisions": list(r.get("decisions") or ()), "show": s.scrub(r.get("show")),
                  "deadline": r.get("deadline") if isinstance(r.get("deadline"), (int, float)) else None,
                  "policy": bool(r.get("policy"))}
    return {"run_id": result.run_id, "flow": result.flow, "status": result.status, "error": _error(s, error),
            "steps": result.steps, "cancel_requested": bool(result.cancel_requested),
            "residue": s.scrub(list(residue or ())), "review": review}


__all__ = ["detail", "event", "outcome", "review_item", "secrets_of", "stored", "summary"]
