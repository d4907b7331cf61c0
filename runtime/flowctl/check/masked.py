"""FC610: a review's ``show`` field that ``flowctl serve`` and the console will mask.

The server never answers with a sensitive value (issue 19): a run's views, its pending review's
``show`` data included, are redacted by name with every field the contracts of its flow mark
``sensitive`` (:mod:`flowctl.server.views`). A review state that shows ``email: input.email`` in a
flow whose ``send_welcome`` contract marks ``email`` sensitive therefore shows ``***redacted***``
to the reviewer in the console, while ``flowctl reviews`` on the store's own machine prints it. This
warning says so where the field is written, so the author can show what the reviewer needs under
another name (a masked form, the last four digits) or accept the mask.

The names are those of contracts the flow's own states call (``tool``, an agent's ``tools``, a
review's ``notify``, fallbacks), compared with each ``show`` key at any depth; a dotted sensitive
path (``card.number``) is compared by its last part.
"""
from __future__ import annotations

from flowctl.check.gate import tool_refs
from flowctl.definition.model import Project


def check_masked_show(project: Project):
    """FC610 (warning) at each ``show`` key of a flow's review states that a contract of the flow
    marks sensitive."""
    for flow in project.flows.values():
        sids = {flow.start} | {t.source for t in flow.transitions} | {t.to for t in flow.transitions}
        states = [project.states[s] for s in sorted(x for x in sids if isinstance(x, str)) if s in project.states]
        marked: dict = {}  # sensitive name -> the contract that marks it
        for state in states:
            for ref, _path in tool_refs(state):
                contract = project.resolve_tool(ref)
                for field in getattr(contract, "sensitive", None) or ():
                    marked.setdefault(str(field).rsplit(".", 1)[-1], contract.ref)
        if not marked:
            continue
        for state in states:
            if state.type == "review" and isinstance(state.get("show"), dict):
                yield from _keys(state, state.get("show"), ("show",), marked, flow.id)


def _keys(state, value: dict, path: tuple, marked: dict, flow_id: str):
    for key, item in value.items():
        where = path + (key,)
        if key in marked:
            yield state.doc.diag("FC610", f"show field '{key}' is masked for reviewers in the console and the API: "
                                 f"{marked[key]} of flow '{flow_id}' marks '{key}' sensitive", where, key=True,
                                 hint="show what the reviewer needs under another name (e.g. the last four digits), "
                                      "or accept the mask (flowctl reviews on the store's machine shows it)")
        elif isinstance(item, dict):
            yield from _keys(state, item, where, marked, flow_id)
