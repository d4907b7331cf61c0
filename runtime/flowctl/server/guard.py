"""The outer ASGI layer of ``flowctl serve``: a request size limit and the last-resort answer.

:class:`Guard` reads a request body before the application sees it, at most ``max_body`` bytes
(default :data:`MAX_BODY`, 1 MiB: the largest payload the store keeps): a ``Content-Length`` over it,
or a streamed body growing past it, is answered 413 ``PAYLOAD_TOO_LARGE`` without reading more; a
body that has not all arrived :data:`BODY_TIMEOUT` seconds after the request began (a client that
declared more than it sends, or sends it a byte at a time) is answered 408 ``REQUEST_TIMEOUT``
instead of holding the connection and its handler for ever. Any
exception the application lets through (a bug: every expected error is a problem already, see
:mod:`flowctl.server.problems`) is logged and answered 500 ``INTERNAL`` as a problem, never as a
traceback.
"""
from __future__ import annotations

import asyncio
import json
import logging

from flowctl.engine.payload import MAX_PAYLOAD

log = logging.getLogger("flowctl.server")

#: Bytes of a request body, at most.
MAX_BODY = MAX_PAYLOAD
#: Seconds a request's body may take to arrive, at most (a megabyte on a slow link takes a few).
BODY_TIMEOUT = 30.0


async def _send_problem(send, status: int, code: str, detail: str) -> None:
    from flowctl.server.problems import MEDIA_TYPE, TITLES

    body = json.dumps({"type": f"urn:flowctl:problem:{code.lower()}", "title": TITLES.get(status, "Error"),
                       "status": status, "detail": detail, "code": code}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: ``Guard(app, max_body=bytes, body_timeout=seconds)``."""

    def __init__(self, app, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT):
        self.app = app
        self.max_body = max_body
        self.body_timeout = body_timeout

    async def _read(self, receive, chunks: list) -> bool:
        """Read the body into ``chunks``; False if the client disconnected; a last ``None`` in
        ``chunks`` when it grew past ``max_body`` (nothing more is read)."""
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                chunks.append(None)
                return True
            chunks.append(chunk)
            if not message.get("more_body"):
                return True

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = f"the request body is larger than {self.max_body} bytes"
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return await _send_problem(send, 400, "INVALID_REQUEST", "Content-Length is not a number")
                if declared > self.max_body:
                    return await _send_problem(send, 413, "PAYLOAD_TOO_LARGE", too_big)
        chunks = []
        try:
            async with asyncio.timeout(self.body_timeout):
                if not await self._read(receive, chunks):
                    return None  # the client went away
        except TimeoutError:  # (breaker finding: a Content-Length the body never filled held the request)
            return await _send_problem(send, 408, "REQUEST_TIMEOUT", f"the request body did not arrive within "
                                       f"{self.body_timeout:g}s")
        if chunks and chunks[-1] is None:
            return await _send_problem(send, 413, "PAYLOAD_TOO_LARGE", too_big)
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        started = False

        async def watch(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, replay, watch)
        except Exception:  # noqa: BLE001 - the last resort: logged, answered as a problem
            log.exception("internal error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _send_problem(send, 500, "INTERNAL", "the server failed to answer this request; it was logged")


__all__ = ["BODY_TIMEOUT", "MAX_BODY", "Guard"]
