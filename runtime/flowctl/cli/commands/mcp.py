"""``flowctl mcp [--transport stdio|http] [--root DIR] [--db URL] [--host 127.0.0.1] [--port 8081]``:
the project's contracts and flows as Model Context Protocol tools (:mod:`flowctl.server.mcp`).

stdio (the default) is what an MCP client launches as a subprocess; ``http`` serves streamable
HTTP at ``http://HOST:PORT/mcp`` on uvicorn, every call with an API key (``flowctl keys create``),
on loopback unless ``--host`` says otherwise (then only while the store holds a live key). Needs
the ``flowctl[mcp]`` extra."""
from __future__ import annotations

import click

from flowctl.cli.commands._common import open_project, open_store
from flowctl.cli.commands.serve import graceful, loopback


def run(transport, host, port, root, db) -> int:
    from flowctl.errors import UsageError

    try:
        import anyio
        import uvicorn

        from flowctl.server import mcp as mcp_server
        from flowctl.server import wire
        from flowctl.server.app import Service
    except ImportError as exc:
        raise UsageError(f"flowctl mcp needs the MCP SDK ({exc.name} is not installed)",
                         hint="pip install 'flowctl[mcp]'") from None
    from flowctl.store.apikeys import keys_of

    project = open_project(root)
    store = open_store(db, project.root, create=True)
    try:
        service = Service(project, store)
        if transport == "stdio":
            anyio.run(mcp_server.serve_stdio, service)
            return 0
        live = keys_of(store).any_live()
        if not loopback(host) and not live:
            raise UsageError(f"refusing to listen on {host}: the store holds no live API key, so nothing could call it",
                             hint="create one first: flowctl keys create NAME --scope invoke:TOOL (or use 127.0.0.1)")
        click.echo(f"flowctl mcp: http://{host}:{port}/mcp (store {store.url})", err=True)
        graceful(uvicorn.Server(wire.config(mcp_server.http_app(service, host), host, port)))
        click.echo("flowctl mcp: stopped", err=True)
    finally:
        store.close()
    return 0
