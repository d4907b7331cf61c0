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

Not offered: *pause at the next checkpoint*. The engine has no such request: a run driven by a
worker or another process can only be asked to cancel (``cancel_requested``, checked by the step
loop and by the worker at each checkpoint); pausing needs the same kind of request flag in the
store and a check in ``engine/loop.py`` that parks the run ``paused`` with a pending kind that
``resume`` knows — changes to the engine's hot path and the store core, not made here.
"""
from __future__ import annotations

import json
import time

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
