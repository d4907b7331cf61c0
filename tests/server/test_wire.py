"""flowctl.server.wire: the uvicorn configuration of flowctl's servers sends each response in one
write (status line, headers and body together), streams a streamed response as it goes, and sends
what it holds before it closes a connection. Real uvicorn on loopback, real sockets; the writes
are counted on the connection's own transport, below the layer under test."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

pytest.importorskip("uvicorn")

from flowctl.server import wire  # noqa: E402 - after the skip


class _Recorder:
    """The connection's real transport, with every write it is given kept (bytes, in order)."""

    def __init__(self, transport):
        self.transport = transport
        self.writes: list = []

    def write(self, data):
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name):
        return getattr(self.transport, name)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/stream":  # three events, each in a loop turn of its own
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(3):
            await send({"type": "http.response.body", "body": b"data: %d\n\n" % n, "more_body": True})
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    body = b'{"decision":"allow"}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server():
    import uvicorn

    recorded: list = []

    class Recording(wire.http_protocol()):
        def connection_made(self, transport):
            rec = _Recorder(transport)
            recorded.append(rec)
            super().connection_made(rec)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = wire.config(app, "127.0.0.1", port)
    config.http = Recording
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield port, recorded
    srv.should_exit = True
    thread.join(10)


def _exchange(port, request: bytes, until: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(request)
        got = b""
        while until not in got:
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_a_response_is_one_write_of_its_headers_and_body(server):
    port, recorded = server
    for _ in range(3):
        got = _exchange(port, b"POST /v1/gate/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", b'"allow"}')
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b'{"decision":"allow"}')
    assert [len(rec.writes) for rec in recorded] == [1, 1, 1]
    assert recorded[0].writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and recorded[0].writes[0].endswith(b'"allow"}')


def test_a_streamed_response_goes_out_as_it_is_made(server):
    port, recorded = server
    got = _exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", b"0\r\n\r\n")
    assert all(b"data: %d" % n in got for n in range(3))
    (rec,) = recorded
    # the headers travel with the first event; each later event is a write of its own, not held to the end
    assert len(rec.writes) == 4 and b"data: 0" in rec.writes[0] and b"data: 2" in rec.writes[2]


def test_what_is_held_is_sent_before_the_connection_closes(server):
    port, recorded = server
    got = _exchange(port, b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", b"\x00never")
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b'{"decision":"allow"}')
    assert len(recorded[0].writes) == 1
