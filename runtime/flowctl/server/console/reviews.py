"""The reviews inbox: ``GET /console/reviews`` [reviews] and ``POST /console/reviews/{run_id}/decide``.

Each run paused for a decision is shown with its ``show`` data (redacted), its deadline (a
countdown), the decisions it offers and, when the review state has a data schema (``data_schema``
or ``input_schema`` on the state: the data a reviewer gives with the decision), a form made from
the schema's top-level properties: a ``string`` (a select for an ``enum``), ``number``/``integer``,
``boolean`` (a checkbox) each a field, required ones marked. Without one, an optional JSON object.
(The definition language has no such field on review states yet — ``flowctl validate`` rejects
``input_schema`` there — so today every review gets the JSON field; the form is ready for when it does.) The decision (confirmed in the browser first) is taken as the API's
``decide`` without a token: a new token is issued and used at once, both recorded as by
``key:<name>`` (the signed-in key), and the run goes on in this request until it ends, pauses or
parks; the data is checked against the schema first (a 422 page says what is wrong, nothing is
decided). The service log records ``review_decided`` with the key's name.
"""
from __future__ import annotations

import json
import time

from flowctl.server import views
from flowctl.server.console.auth import action, page
from flowctl.server.console.web import go, message, render

FIELD_TYPES = ("string", "number", "integer", "boolean")


def schema_of(service, row, state_id: str):
    """The review state's ``input_schema`` (from the run's pinned definition), or None."""
    from flowctl.errors import FlowctlError

    try:
        project = service.engine.project_for(row["digest"])
    except FlowctlError:
        project = service.project
    state = project.states.get(state_id or "")
    if state is None:
        return None
    schema = state.get("data_schema") or getattr(state, "input_schema", None)
    return schema if schema and hasattr(schema, "get") else None


def form_fields(schema) -> list:
    """``[{name, type, required, enum, title}]`` of a schema's top-level properties of simple types."""
    if not schema or schema.get("type") not in (None, "object"):
        return []
    required = set(schema.get("required") or ())
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        if not hasattr(prop, "get"):
            continue
        kind = prop.get("type") if prop.get("type") in FIELD_TYPES else ("string" if "enum" in prop else None)
        if kind is None:
            continue
        out.append({"name": name, "type": kind, "required": name in required, "enum": list(prop.get("enum") or ()),
                    "title": prop.get("title") or prop.get("description") or ""})
    return out


def data_from(fields: list, posted: dict):
    """The decision's data from the posted ``data.<name>`` values, typed by ``fields``; without
    fields, the JSON object posted as ``data_json`` (None when empty). Raises ``ValueError`` naming
    a number that is not one, or JSON that is not an object."""
    if not fields:
        text = (posted.get("data_json") or "").strip()
        if not text:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"the data is not JSON (or nests too deeply): {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("the data must be a JSON object")
        return data
    data = {}
    for f in fields:
        raw = posted.get(f"data.{f['name']}")
        if f["type"] == "boolean":
            data[f["name"]] = raw in ("on", "true", "1")
            continue
        if raw is None or raw == "":
            continue
        if f["type"] == "integer":
            try:
                data[f["name"]] = int(raw)
            except ValueError:
                raise ValueError(f"{f['name']} must be a whole number") from None
        elif f["type"] == "number":
            try:
                data[f["name"]] = float(raw)
            except ValueError:
                raise ValueError(f"{f['name']} must be a number") from None
        else:
            data[f["name"]] = raw
    return data


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
        from flowctl.definition.runtime_schemas import check_instance

        engine = service.engine
        row = service.store.get_run(request.path_params["run_id"])
        pending = views.pending(views.secrets_of(service.project, row), row.get("cursor"))
        if row["status"] != "paused" or pending is None:
            return message(request, 409, "Not done", f"run {row['id']} is not paused for review (it is {row['status']})")
        decision = fields.get("decision") or ""
        if decision not in pending["decisions"]:
            return message(request, 422, "Not done", f"'{decision}' is not one of {', '.join(pending['decisions'])}")
        schema = schema_of(service, row, pending["state"])
        try:
            data = data_from(form_fields(schema), fields)
        except ValueError as exc:
            return message(request, 422, "Not done", str(exc))
        problem = check_instance(schema, data if data is not None else {}) if schema else None
        if problem:
            return message(request, 422, "Not done", f"the review's data does not match its schema: {problem}")
        token = engine.reissue_token(row["id"], by=viewer.by)
        result = engine.resume(row["id"], token=token, decision=decision, data=data, by=viewer.by)
        service.log.append(viewer.name, {"at": time.time(), "caller": viewer.name, "kind": "review_decided",
                                         "outcome": decision, "reason": fields.get("reason") or None,
                                         "data": {"run_id": result.run_id, "status": result.status, "via": "console"}})
        return go(request, f"/console/runs/{result.run_id}")


__all__ = ["data_from", "form_fields", "inbox", "routes"]
