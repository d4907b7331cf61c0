"""A project, a store and a signed-in session for the console tests (tests/server/console/).

The project is serverkit's (``charge``: a refund with compensation, then a review) plus ``ship``
(a tool that fails while ``tk.BROKEN[0]`` holds, or when sent to ``nowhere``) and ``grant`` (a
review with a 2-hour deadline and a ``data_schema`` whose form has a field of each kind) and ``parent`` (``ship`` as a child run). :class:`Console` signs in
through the sign-in form with a :class:`starlette.testclient.TestClient` (it keeps the cookie).
"""
from __future__ import annotations

import re
import textwrap

import pytest

import flowctl
from flowctl.engine.tools import resolve
from flowctl.server import create_app
from flowctl.store.apikeys import keys_of
from flowctl.store.sql import open_store
from support.enginekit import contract, task
from support.helpers import write_project
from support.serverkit import FILES, TOOLS

SHIP_TOOLS = """
BROKEN = [True]

def ship(input, call):
    if BROKEN[0]:
        raise ConnectionError("carrier down")
    if input.get("to") == "nowhere":
        raise ValueError("no such address: nowhere")
    return {"shipped": input.get("to")}
"""

CONSOLE_FILES = {
    **FILES,
    **contract("ship", "ship"),
    **task("send", "ship@1.0.0", extra="input: {to: context.to}\n"),
    "states/address.yaml": "id: address\ntype: pass\nset: {to: input.to}\n",
    "transitions/ship.yaml": textwrap.dedent("""\
        flow: ship
        version: 1
        start: address
        transitions:
          - {from: address, to: send}
          - {from: send, to: done}
        """),
    "states/grant_ask.yaml": textwrap.dedent("""\
        id: grant_ask
        type: review
        decisions: [approve, reject]
        show: {customer: input.customer}
        timeout: 2h
        on_timeout: {goto: done}
        data_schema:
          type: object
          required: [limit]
          additionalProperties: false
          properties:
            limit: {type: integer, minimum: 1, maximum: 1000, description: the credit limit granted}
            tier: {enum: [gold, silver]}
            rush: {type: boolean}
            contact:
              type: object
              required: [name]
              properties: {name: {type: string}, phone: {type: string}}
            tags: {type: array, items: {type: string}}
            extra: {anyOf: [{type: string}, {type: object}]}
        """),
    "states/fan.yaml": "id: fan\ntype: subflow\nflow: ship\ninput: {to: input.to}\n",
    "transitions/parent.yaml": "flow: parent\nversion: 1\nstart: fan\ntransitions:\n  - {from: fan, to: done}\n",
    "transitions/grant.yaml": textwrap.dedent("""\
        flow: grant
        version: 1
        start: grant_ask
        transitions:
          - {from: grant_ask, to: done}
        """),
}


def make_console_project(tmp_path):
    files = dict(CONSOLE_FILES)
    files["tools/tk.py"] = textwrap.dedent(TOOLS) + textwrap.dedent(SHIP_TOOLS)
    return write_project(tmp_path / "p", files)


class Console:
    """The app on a SQLite store; ``key(name, *scopes)`` -> printed key; ``client(key)`` -> a
    signed-in TestClient; ``csrf(client, url)`` -> the CSRF token a page carries; ``fix()`` mends ship."""

    def __init__(self, tmp_path):
        self.root = make_console_project(tmp_path)
        self.project = flowctl.load_project(self.root)
        self.store = open_store(f"sqlite:///{tmp_path}/flowctl.db")
        self.asgi = create_app(self.project, self.store)
        self.service = self.asgi.app.state.service
        self.engine = self.service.engine

    def key(self, name, *scopes):
        return keys_of(self.store).create(name, scopes)[1]

    def client(self, key=None):
        from starlette.testclient import TestClient

        c = TestClient(self.asgi, base_url="http://testserver")
        if key is not None:
            page = c.get("/console/signin")
            pre = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            c.post("/console/signin", data={"csrf": pre, "key": key}, follow_redirects=False)
        return c

    @staticmethod
    def csrf(client, url):
        return re.search(r'name="csrf" value="([^"]+)"', client.get(url).text).group(1)

    def tool_flag(self):
        return resolve("tk:BROKEN", str(self.root / "orchestration" / "tools"))

    def fix(self):
        self.tool_flag()[0] = False

    def events(self, run_id):
        return [e["type"] for e in self.store.events(run_id)]

    def close(self):
        self.store.close()


@pytest.fixture
def console(tmp_path):
    """A :class:`Console` (import it into a test module: tests/server/console/ has no conftest.py,
    so that ``from conftest import …`` in tests/server stays unambiguous)."""
    c = Console(tmp_path)
    yield c
    c.close()
