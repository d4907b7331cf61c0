"""``flowctl reviews``: runs paused for a human (or machine) decision."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_reader, project_root, review_states


def run(root, db, fmt, reissue=None, by=None) -> int:
    from flowctl.engine.clock import iso

    if reissue:
        from flowctl.cli.commands._common import open_engine

        engine = open_engine(root, db, progress=False, check=False, create=False)
        try:
            token = engine.reissue_token(reissue, by=by)
            pending = engine.store.get_run(reissue)["cursor"]["pending"]
        finally:
            engine.store.close()
        click.echo(f"new token for {reissue} (the old one no longer works):")
        click.echo(f"flowctl resume {reissue} --token {token} --decision {'|'.join(pending.get('decisions') or [])}")
        return EXIT_OK

    store = open_reader(db, project_root(root), empty_ok=True)
    try:
        rows = store.list_runs(status="paused", limit=0)
        workers = (store.worker_ids() if hasattr(store, "worker_ids")
                   else {w["id"] for w in store.list_workers(live_only=False)} if hasattr(store, "list_workers") else set())
    finally:
        store.close()
    states = review_states(root, [((r.get("cursor") or {}).get("pending") or {}).get("state") for r in rows])
    items = []
    for r in rows:
        pending = (r.get("cursor") or {}).get("pending") or {}
        state = states.get(pending.get("state") or "")
        notified = bool(pending.get("policy") or (state is not None and state.get("notify")))
        items.append({"run_id": r["id"], "flow": r["flow"], "state": pending.get("state"), "show": pending.get("show"),
                      "decisions": pending.get("decisions"), "policy": bool(pending.get("policy")),
                      "deadline": iso(pending["deadline"]) if pending.get("deadline") else None,
                      "parent_id": r.get("parent_id"), "paused_by": r.get("owner"), "notified": notified,
                      "token": f"flowctl reviews --reissue {r['id']}"})
    if fmt == "json":
        click.echo(json.dumps(items, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not items:
        click.echo("no pending reviews")
    for it in items:
        click.echo(f"{it['run_id']}  {it['flow']} at '{it['state']}'  decisions: {'|'.join(it['decisions'] or [])}"
                   + (f"  deadline {it['deadline']}" if it["deadline"] else ""))
        click.echo("    " + json.dumps(it["show"], ensure_ascii=False))
        if it["parent_id"]:
            click.echo(f"    child run of {it['parent_id']} (which waits for it)")
        if not it["notified"] and it["paused_by"] in workers:  # a worker prints no token: nobody has one
            click.echo(f"    no notify tool, and worker {it['paused_by']} paused the run (workers print no "
                       f"token): get one: {it['token']}")
        elif not it["notified"]:
            by = f" ({it['paused_by']})" if it["paused_by"] else ""
            click.echo(f"    no notify tool: the token was printed once, by the process that paused the run{by}; "
                       f"get a new one: {it['token']}")
    return EXIT_OK


def unnotified_reviews(project, flow_id: str) -> list:
    """The review states of ``flow_id`` and of the flows it starts (parallel, map, subflow), at any
    depth, that have no ``notify`` tool: ``[(flow id, State)]``. A run that pauses at one while a
    worker drives it has its token shown to nobody (workers print no tokens)."""
    from flowctl.check.checks import flow_graph
    from flowctl.engine.engine import _child_flows

    found, todo, seen = [], [flow_id], set()
    while todo:
        fid = todo.pop(0)
        flow = project.flows.get(fid)
        if flow is None or fid in seen:
            continue
        seen.add(fid)
        for sid in flow_graph(project, flow):
            state = project.states.get(sid)
            if state is not None and state.type == "review" and not state.get("notify"):
                found.append((fid, state))
        todo.extend(_child_flows(project, flow))
    return found
