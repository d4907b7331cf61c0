"""Takeover actions on one run [runs:write], each confirmed in the browser, each with a reason, each
recorded with who (``key:<name>``, the signed-in key) and why:

* ``POST /console/runs/{run_id}/cancel`` — cancel, compensating (``compensate=yes``, the default)
  or not, as ``flowctl cancel`` (:meth:`flowctl.engine.engine.Engine.cancel`): the run's log gets
  ``run_cancelled`` by the key; the reason goes to the service log (``run_cancelled``), since the
  engine's cancel records no reason.
* ``POST /console/runs/{run_id}/redrive`` — retry from the failed step: a failed run continues from
  the state that failed under its pinned definition (:func:`flowctl.engine.redrive.redrive`; the
  run's log gets ``run_redriven`` with who and why).
* ``POST /console/runs/{run_id}/edit`` — edit the context, then continue: the posted JSON object
  replaces the failed run's context (``context_overridden`` holds before and after, with who and
  why) and the run is redriven with it.

* ``POST /console/runs/{run_id}/pause`` — pause at the next checkpoint, as ``flowctl pause``
  (:func:`flowctl.engine.pause.request`): the request holds the key and the reason, and the
  run's log gets ``run_paused`` with both when it stops. ``POST /console/runs/{run_id}/resume`` —
  continue a run an operator paused (``run_resumed`` by the key; the reason goes to the service
  log), in this request until it ends, pauses or parks.
"""
from __future__ import annotations

import json
import time

from flowctl.engine.pause import is_paused_by_operator
from flowctl.server.console.auth import action
from flowctl.server.console.web import go, message

#: characters of a reason, at most
REASON = 500


def _reason(fields: dict):
    return (fields.get("reason") or "").strip()[:REASON] or None


def routes(router, service) -> None:
    def record(viewer, kind: str, run_id: str, reason, outcome: str, **data) -> None:
        service.log.append(viewer.name, {"at": time.time(), "caller": viewer.name, "kind": kind, "outcome": outcome,
                                         "reason": reason, "data": dict(data, run_id=run_id, via="console")})

    @router.post("/runs/{run_id}/cancel")
    @action("runs:write")
    def cancel(request, viewer, fields):
        """Cancel the run (see the module)."""
        reason = _reason(fields)
        if reason is None:
            return message(request, 422, "Not done", "Say why you cancel the run (the reason is recorded).")
        compensate = fields.get("compensate", "yes") != "no"
        result = service.engine.cancel(request.path_params["run_id"], compensate=compensate, by=viewer.by)
        record(viewer, "run_cancelled", result.run_id, reason, result.status, compensate=compensate)
        return go(request, f"/console/runs/{result.run_id}")

    @router.post("/runs/{run_id}/pause")
    @action("runs:write")
    def pause(request, viewer, fields):
        """Ask the run to pause at its next checkpoint."""
        reason = _reason(fields)
        if reason is None:
            return message(request, 422, "Not done", "Say why you pause the run (the reason is recorded).")
        asked = service.engine.pause(request.path_params["run_id"], reason=reason, by=viewer.by)
        record(viewer, "pause_requested", asked["run_id"], reason, "requested" if asked["new"] else "already requested")
        return go(request, f"/console/runs/{asked['run_id']}")

    @router.post("/runs/{run_id}/resume")
    @action("runs:write")
    def resume(request, viewer, fields):
        """Continue a run an operator paused, from its checkpoint."""
        reason = _reason(fields)
        if reason is None:
            return message(request, 422, "Not done", "Say why you resume the run (the reason is recorded).")
        row = service.store.get_run(request.path_params["run_id"])
        if not is_paused_by_operator(row):
            return message(request, 409, "Not done", f"run {row['id']} is not paused by an operator (it is {row['status']})")
        result = service.engine.resume(row["id"], by=viewer.by)
        record(viewer, "run_resumed", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")

    @router.post("/runs/{run_id}/redrive")
    @action("runs:write")
    def redrive(request, viewer, fields):
        """Retry the failed run from its failed step."""
        from flowctl.engine.redrive import redrive as redrive_run

        reason = _reason(fields)
        if reason is None:
            return message(request, 422, "Not done", "Say why you retry the run (the reason is recorded).")
        result = redrive_run(service.engine, request.path_params["run_id"], by=viewer.by, reason=reason)
        record(viewer, "run_redriven", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")

    @router.post("/runs/{run_id}/edit")
    @action("runs:write")
    def edit(request, viewer, fields):
        """Replace the failed run's context, then continue it from its failed step."""
        from flowctl.engine.redrive import redrive as redrive_run

        reason = _reason(fields)
        if reason is None:
            return message(request, 422, "Not done", "Say why you edit the context (the reason is recorded).")
        try:
            context = json.loads(fields.get("context") or "")
        except (ValueError, RecursionError) as exc:
            return message(request, 422, "Not done", f"The context is not JSON (or nests too deeply): {exc}")
        if not isinstance(context, dict):
            return message(request, 422, "Not done", "The context must be a JSON object.")
        result = redrive_run(service.engine, request.path_params["run_id"], by=viewer.by, reason=reason,
                             context=context)
        record(viewer, "context_overridden", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")


__all__ = ["routes"]
