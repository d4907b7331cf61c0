"""The reviews inbox: ``GET /console/reviews`` [reviews] and ``POST /console/reviews/{run_id}/decide``.

Each run paused for a decision is shown with its ``show`` data (redacted), its deadline (a
countdown), the decisions it offers and, when the review state has a ``data_schema`` (the data a
reviewer gives with the decision), a form made from it (:mod:`flowctl.server.console.forms`:
scalars, enums, one level of nested objects, lists of scalars, JSON for the rest). Without one, an
optional JSON object. The decision (confirmed in the browser first) is taken as the API's
``decide`` without a token: the data is checked against the schema first, by the engine
(:meth:`Engine.check_decision`; a 422 page names where it is wrong, and nothing is recorded), then
a new token is issued and used at once, both recorded as by ``key:<name>`` (the signed-in key),
and the run goes on in this request until it ends, pauses or parks. The service log records
``review_decided`` with the key's name.
"""
from __future__ import annotations

import time

from flowctl.server import views
from flowctl.server.console.auth import action, page
from flowctl.server.console.forms import FormError, data_from, form_fields
from flowctl.server.console.web import go, message, render


def schema_of(service, row, state_id: str):
    """The review state's ``data_schema`` (from the run's pinned definition), or None."""
    from flowctl.errors import FlowctlError

    try:
        project = service.engine.project_for(row["digest"])
    except FlowctlError:
        project = service.project
    schema = getattr(project.states.get(state_id or ""), "data_schema", None)
    return schema if isinstance(schema, dict) and schema else None


def inbox(service) -> list:
    """The pending reviews, each as :func:`flowctl.server.views.review_item` plus its form fields."""
    now = service.engine.clock.time()
    items = []
    for row in service.store.list_runs(status="paused", limit=0):
        item = views.review_item(service.project, row)
        if item is None:
            continue
        item["fields"] = form_fields(schema_of(service, row, item["state"]))
        item["left"] = item["deadline"] - now if isinstance(item.get("deadline"), (int, float)) else None
        items.append(item)
    return items


def routes(router, service) -> None:
    @router.get("/reviews")
    @page("reviews")
    def reviews(request, viewer):
        """The inbox (``?part=list``: the list alone, which the page polls)."""
        template = "_reviews_list.html" if request.query_params.get("part") == "list" else "reviews.html"
        return render(request, template, items=inbox(service), now=service.engine.clock.time())

    @router.post("/reviews/{run_id}/decide")
    @action("reviews")
    def decide(request, viewer, fields):
        """Decide one review as the signed-in key (see the module)."""
        from flowctl.errors import ReviewDataInvalid

        engine = service.engine
        row = service.store.get_run(request.path_params["run_id"])
        pending = views.pending(views.secrets_of(service.project, row), row.get("cursor"))
        if row["status"] != "paused" or pending is None:
            return message(request, 409, "Not done", f"run {row['id']} is not paused for review (it is {row['status']})")
        decision = fields.get("decision") or ""
        if decision not in pending["decisions"]:
            return message(request, 422, "Not done", f"'{decision}' is not one of {', '.join(pending['decisions'])}")
        try:
            data = data_from(form_fields(schema_of(service, row, pending["state"])), fields)
            data = engine.check_decision(row["id"], decision, data)
        except (FormError, ReviewDataInvalid) as exc:  # both say where in the data (exc.pointer)
            return message(request, 422, "Not done", f"{exc} — nothing was recorded")
        token = engine.reissue_token(row["id"], by=viewer.by)
        result = engine.resume(row["id"], token=token, decision=decision, data=data, by=viewer.by)
        service.log.append(viewer.name, {"at": time.time(), "caller": viewer.name, "kind": "review_decided",
                                         "outcome": decision, "reason": fields.get("reason") or None,
                                         "data": {"run_id": result.run_id, "status": result.status, "via": "console"}})
        return go(request, f"/console/runs/{result.run_id}")


__all__ = ["inbox", "routes", "schema_of"]
