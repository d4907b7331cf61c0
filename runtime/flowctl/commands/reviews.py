"""``flowctl reviews``: runs paused for a human (or machine) decision."""
from __future__ import annotations

import json

import click

from . import EXIT_OK
from ._common import open_project, open_store


def run(root, db, fmt, reissue=None, by=None) -> int:
    from ..clock import iso

    if reissue:
        from ._common import open_engine

        engine = open_engine(root, db, progress=False, check=False, create=False)
        try:
            token = engine.reissue_token(reissue, by=by)
            pending = engine.store.get_run(reissue)["cursor"]["pending"]
        finally:
            engine.store.close()
        click.echo(f"new token for {reissue} (the old one no longer works):")
        click.echo(f"flowctl resume {reissue} --token {token} --decision {'|'.join(pending.get('decisions') or [])}")
        return EXIT_OK

    project = open_project(root)
    store = open_store(db, project.root)
    try:
        rows = store.list_runs(status="paused", limit=0)
    finally:
        store.close()
    items = []
    for r in rows:
        pending = (r.get("cursor") or {}).get("pending") or {}
        items.append({"run_id": r["id"], "flow": r["flow"], "state": pending.get("state"), "show": pending.get("show"),
                      "decisions": pending.get("decisions"), "policy": bool(pending.get("policy")),
                      "deadline": iso(pending["deadline"]) if pending.get("deadline") else None})
    if fmt == "json":
        click.echo(json.dumps(items, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not items:
        click.echo("no pending reviews")
    for it in items:
        click.echo(f"{it['run_id']}  {it['flow']} at '{it['state']}'  decisions: {'|'.join(it['decisions'] or [])}"
                   + (f"  deadline {it['deadline']}" if it["deadline"] else ""))
        click.echo("    " + json.dumps(it["show"], ensure_ascii=False))
    return EXIT_OK
