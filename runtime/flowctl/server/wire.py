"""How ``flowctl serve`` and ``flowctl mcp --transport http`` run on uvicorn: :func:`config`.

uvicorn answers a request with two writes to the socket, the status line and headers, then the
body, each its own ``send`` system call and, on loopback with ``TCP_NODELAY``, its own segment:
the client wakes for the headers, goes back to wait, and wakes again for the body. On a machine
whose cores the clients share with the server (this project's benchmark machine has two), those
extra wake-ups were most of the cost of a trivial route: a bare Starlette route went from 4,300 to
8,800 requests/s, p99 10 → 2.6 ms, with 8 clients, when the two writes became one (issue 19's
bench, same run). :func:`coalescing` makes that so for any uvicorn HTTP protocol: the writes a
connection makes within one turn of the event loop are sent together at the end of that turn
(``loop.call_soon``), in order; closing the connection sends what is held first. Nothing waits
for more data: a streamed response (Server-Sent Events) still goes out event by event.
"""
from __future__ import annotations

import asyncio
import importlib.util


class _Held:
    """A connection's transport whose :meth:`write` calls within one loop turn are sent as one."""

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport, loop):
        self._transport = transport
        self._held = None
        self._loop = loop

    def write(self, data) -> None:
        if self._held is None:
            self._held = [bytes(data)]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(bytes(data))

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name):  # everything else (is_closing, pause_reading, get_extra_info …) as is
        return getattr(self._transport, name)


def coalescing(protocol: type) -> type:
    """A subclass of the uvicorn HTTP protocol class ``protocol`` whose connections send the
    writes of one event-loop turn as one (see the module)."""

    class Coalescing(protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(_Held(transport, asyncio.get_running_loop()))

    Coalescing.__name__ = Coalescing.__qualname__ = f"Coalescing{protocol.__name__}"
    return Coalescing


def http_protocol() -> type:
    """uvicorn's httptools protocol when ``httptools`` is installed (the ``flowctl[serve]`` extra),
    else its h11 one, made :func:`coalescing`."""
    if importlib.util.find_spec("httptools") is not None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as protocol
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as protocol
    return coalescing(protocol)


def config(app, host: str, port: int, **extra):
    """The ``uvicorn.Config`` flowctl's servers run ``app`` with: :func:`http_protocol`, uvloop when
    installed, no ``Server`` header, no access log (every ``/v1`` decision and refusal is in the
    service log already, and a line per request costs the gate check's latency budget), warnings
    only, and no ``X-Forwarded-For``: uvicorn trusts it by default from 127.0.0.1, so any process on
    the machine could have a refusal recorded under an address of its choosing; the address
    recorded is the connection's own. ``extra``: more ``uvicorn.Config`` arguments."""
    import uvicorn

    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "auto"
    return uvicorn.Config(app, host=host, port=port, http=http_protocol(), loop=loop, server_header=False,
                          access_log=False, log_level="warning", proxy_headers=False, **extra)


__all__ = ["coalescing", "config", "http_protocol"]
