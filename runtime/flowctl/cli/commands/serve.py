"""``flowctl serve [--host 127.0.0.1] [--port 8080] [--db URL] [--root DIR]``: the gate, the runs
and the reviews of the project over HTTP (:mod:`flowctl.server`), on uvicorn.

Binds to 127.0.0.1 unless ``--host`` says otherwise; on any other address it refuses to start
(exit 2) while the store holds no live API key. Every ``/v1`` request needs a key
(``flowctl keys create``). Needs the ``flowctl[serve]`` extra (fastapi, uvicorn)."""
from __future__ import annotations

import ipaddress

import click

from flowctl.cli.commands._common import open_project, open_store


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run(host, port, root, db, rate, burst) -> int:
    from flowctl.errors import UsageError

    try:
        import uvicorn

        from flowctl.server import create_app, wire
    except ImportError as exc:
        raise UsageError(f"flowctl serve needs FastAPI and uvicorn ({exc.name} is not installed)",
                         hint="pip install 'flowctl[serve]'") from None
    from flowctl.store.apikeys import keys_of

    project = open_project(root)
    store = open_store(db, project.root, create=True)
    try:
        live = keys_of(store).any_live()
        if not loopback(host) and not live:
            raise UsageError(f"refusing to listen on {host}: the store holds no live API key, so nothing could call it",
                             hint="create one first: flowctl keys create NAME --scope gate (or listen on 127.0.0.1)")
        if not live:
            click.echo("note: no API key yet: every /v1 request is refused (401) until one is created with "
                       "flowctl keys create NAME --scope gate", err=True)
        app = create_app(project, store, rate=rate, burst=burst)
        sock = _listen(host, port)  # bound here, so a port in use is a clear error before anything is said
        port = sock.getsockname()[1]
        click.echo(f"flowctl serve: http://{host}:{port} (OpenAPI at /openapi.json; store {store.url})", err=True)
        click.echo(f"definitions: {len(project.flows)} flows, {len(project.contracts)} contracts, {len(project.policies)} "
                   f"policies (snapshot {project.digest()[:12]}), read once: restart flowctl serve after changing "
                   "them", err=True)  # (new-user finding: an edited policy was silently not in force)
        server = uvicorn.Server(wire.config(app, host, port))
        graceful(server, sockets=[sock])
        click.echo("flowctl serve: stopped", err=True)
    finally:
        store.close()
    return 0


def graceful(server, **kwargs) -> None:
    """``server.run(**kwargs)`` (a ``uvicorn.Server``). SIGTERM or Ctrl-C makes uvicorn finish the
    requests in flight and stop, then raise the signal again; that stop is this command's normal end
    (exit 0), not an interruption (the CLI's SIGTERM and Ctrl-C answer, exit 130, is for commands
    cut off in the middle of a run)."""
    try:
        server.run(**kwargs)
    except KeyboardInterrupt:
        if not server.should_exit:  # not the stop uvicorn carried out
            raise


def _listen(host: str, port: int):
    """A TCP socket bound to ``host:port`` (port 0: any free one). Raises ``UsageError`` when the
    address cannot be had (in use, not this machine's, no permission)."""
    import socket

    from flowctl.errors import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (proto 0 does
    # not), and without it Nagle's algorithm holds a response's body until the client's delayed ACK
    # (about 40 ms a request on loopback); the option is also set here, for the accepted sockets
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = ("another process listens there: stop it, or choose another port, e.g. --port 8081"
                if exc.errno in (98, 48) else "check --host and --port")
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint=hint) from None
    return sock
