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

    def takeover(name: str, doing: str):
        """``fn(request, viewer, fields, reason, run_id)`` as ``POST /runs/{run_id}/<name>`` [runs:write],
        refused (422) without a reason: "Say why you <doing>"."""
        def wrap(fn):
            def handler(request, viewer, fields):
                reason = _reason(fields)
                if reason is None:
                    return message(request, 422, "Not done", f"Say why you {doing} (the reason is recorded).")
                return fn(request, viewer, fields, reason, request.path_params["run_id"])

            handler.__name__, handler.__doc__ = fn.__name__, fn.__doc__
            return router.post(f"/runs/{{run_id}}/{name}")(action("runs:write")(handler))
        return wrap

    @takeover("cancel", "cancel the run")
    def cancel(request, viewer, fields, reason, run_id):
        """Cancel the run (see the module)."""
        compensate = fields.get("compensate", "yes") != "no"
        result = service.engine.cancel(run_id, compensate=compensate, by=viewer.by)
        record(viewer, "run_cancelled", result.run_id, reason, result.status, compensate=compensate)
        return go(request, f"/console/runs/{result.run_id}")

    @takeover("pause", "pause the run")
    def pause(request, viewer, fields, reason, run_id):
        """Ask the run to pause at its next checkpoint."""
        asked = service.engine.pause(run_id, reason=reason, by=viewer.by)
        record(viewer, "pause_requested", asked["run_id"], reason, "requested" if asked["new"] else "already requested")
        return go(request, f"/console/runs/{asked['run_id']}")

    @takeover("resume", "resume the run")
    def resume(request, viewer, fields, reason, run_id):
        """Continue a run an operator paused, from its checkpoint."""
        row = service.store.get_run(run_id)
        if not is_paused_by_operator(row):
            return message(request, 409, "Not done", f"run {row['id']} is not paused by an operator (it is {row['status']})")
        result = service.engine.resume(row["id"], by=viewer.by)
        record(viewer, "run_resumed", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")

    @takeover("redrive", "retry the run")
    def redrive(request, viewer, fields, reason, run_id):
        """Retry the failed run from its failed step."""
        from flowctl.engine.redrive import redrive as redrive_run

        result = redrive_run(service.engine, run_id, by=viewer.by, reason=reason)
        record(viewer, "run_redriven", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")

    @takeover("edit", "edit the context")
    def edit(request, viewer, fields, reason, run_id):
        """Replace the failed run's context, then continue it from its failed step."""
        from flowctl.engine.redrive import redrive as redrive_run

        from flowctl.server.console.forms import parse_json

        try:  # no NaN, Infinity or lone surrogate either: the store could not hold or show them
            context = parse_json(fields.get("context") or "", "The context is not JSON")
        except ValueError as exc:
            return message(request, 422, "Not done", f"{exc}")
        if not isinstance(context, dict):
            return message(request, 422, "Not done", "The context must be a JSON object.")
        result = redrive_run(service.engine, run_id, by=viewer.by, reason=reason, context=context)
        record(viewer, "context_overridden", result.run_id, reason, result.status)
        return go(request, f"/console/runs/{result.run_id}")


__all__ = ["routes"]
