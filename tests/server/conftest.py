"""Fixtures of the server tests: an app on a SQLite store, a key factory and an HTTP client."""
from __future__ import annotations

import asyncio

import httpx
import pytest

import flowctl
from flowctl.server import create_app
from flowctl.store.apikeys import keys_of
from flowctl.store.sql import open_store
from support.serverkit import make_server_project


class _Client:
    """Blocking calls through ``httpx.AsyncClient`` on ``httpx.ASGITransport`` (a real HTTP client
    driving the ASGI app in process): ``get``/``post``/``request`` as httpx's, and ``gather`` to send
    several requests at once."""

    def __init__(self, asgi):
        self.asgi = asgi

    def _client(self):
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.asgi), base_url="http://testserver")

    def request(self, method, url, **kw):
        async def go():
            async with self._client() as c:
                return await c.request(method, url, **kw)

        return asyncio.run(go())

    def get(self, url, **kw):
        return self.request("GET", url, **kw)

    def post(self, url, **kw):
        return self.request("POST", url, **kw)

    def gather(self, calls):
        """``[(method, url, kwargs)]`` sent concurrently; the responses in the same order."""
        async def go():
            async with self._client() as c:
                return await asyncio.gather(*(c.request(m, u, **kw) for m, u, kw in calls))

        return asyncio.run(go())


class Api:
    """``client`` (httpx over ASGI), ``key(name, *scopes)`` -> headers, the ``project``/``store``."""

    def __init__(self, tmp_path, url=None, **app_kw):
        self.root = make_server_project(tmp_path)
        self.project = flowctl.load_project(self.root)
        self.store = open_store(url or f"sqlite:///{tmp_path}/flowctl.db", create=True)
        self.asgi = create_app(self.project, self.store, **app_kw)
        self.service = self.asgi.app.state.service
        self.client = _Client(self.asgi)

    def key(self, name, *scopes):
        _, printed = keys_of(self.store).create(name, scopes)
        return {"Authorization": f"Bearer {printed}"}

    def close(self):
        self.service.refusals.flush()  # what the server writes when it stops (and its timer stopped)
        self.store.close()


@pytest.fixture
def api(tmp_path):
    a = Api(tmp_path)
    yield a
    a.close()


@pytest.fixture
def make_api(tmp_path):
    made = []

    def make(**kw):
        a = Api(tmp_path / f"a{len(made)}", **kw)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()
