"""flowctl mcp (flowctl.server.mcp) with the official MCP SDK's own client, over stdio (``flowctl
mcp`` spawned) and over streamable HTTP (``flowctl mcp --transport http`` spawned): the tools and
their annotations, a read-only call, a gated call denied (an error result with the reason), an
allowed one recorded in the session's audit log with the caller."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the flowctl[mcp] extra (the MCP SDK) is not installed")
httpx2 = pytest.importorskip("httpx2", reason="the MCP SDK's HTTP client")

from mcp import Client, ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from flowctl.store.apikeys import keys_of  # noqa: E402
from flowctl.store.sql import open_store  # noqa: E402
from support.serverkit import make_server_project  # noqa: E402

FLOWCTL = str(Path(sys.executable).with_name("flowctl"))


async def exercise(client):
    """List the tools and call four; what came back."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    got = {"tools": listed}
    got["read"] = await client.call_tool("get_order", {"order_id": "o1"})
    got["denied"] = await client.call_tool("wipe", {})
    got["over"] = await client.call_tool("refund", {"amount": 500})
    got["allowed"] = await client.call_tool("refund", {"amount": 5})
    got["held"] = await client.call_tool("refund", {"amount": 60})
    got["flow"] = await client.call_tool("flow.charge", {"amount": 3})
    return got


def check(got, store, caller):
    tools = got["tools"]
    assert {"get_order", "refund", "wipe", "flow.charge"} <= set(tools)
    assert tools["get_order"].annotations.read_only_hint is True
    assert tools["refund"].annotations.read_only_hint is False
    assert tools["refund"].annotations.destructive_hint is False  # compensable
    assert tools["refund"].input_schema["required"] == ["amount"]
    read = got["read"]
    assert not read.is_error and read.structured_content == {"order_id": "o1", "total": 80}
    denied = got["denied"]
    assert denied.is_error and "default-deny" in denied.content[0].text
    assert got["over"].is_error and "outside [0, 100]" in got["over"].content[0].text
    assert not got["allowed"].is_error and got["allowed"].structured_content == {"ok": True}
    held = got["held"]  # sent to review: not an error, it waits (and says how a human decides)
    assert not held.is_error and held.structured_content["status"] == "review"
    assert held.structured_content["decisions"] == ["approve", "reject"]
    assert "/decide" in held.structured_content["how"] and "same arguments" in held.structured_content["how"]
    flow = got["flow"].structured_content
    assert flow["status"] == "paused" and flow["waiting"] == "review" and flow["decisions"] == ["approve", "reject"]
    assert "token" not in flow and "--token TOKEN" in flow["how"]  # how a human decides; never the token itself
    sessions = [r for r in store.list_runs(limit=0) if r["flow"].startswith("session:mcp-")]
    assert len(sessions) == 1  # one connection, one session
    events = store.events_page(sessions[0]["id"], 0, 1000)
    calls = [(e["state"], e["data"]["by"]) for e in events if e["type"] == "state_entered"]
    assert calls == [("get_order", caller), ("wipe", caller), ("refund", caller), ("refund", caller),
                     ("refund", caller)]
    decided = [e["data"]["outcome"] for e in events if e["type"] == "policy_decided"]
    assert decided == ["deny", "deny", "allow", "review"]
    assert sessions[0]["status"] == "paused" and held.structured_content["review_id"] == sessions[0]["id"]
    assert [e["data"]["tool"] for e in events if e["type"] == "tool_succeeded"] == ["get_order@1.0.0", "refund@1.0.0"]


@pytest.fixture
def project(tmp_path):
    root = make_server_project(tmp_path)
    return root, f"sqlite:///{tmp_path}/flowctl.db"


def test_mcp_over_stdio_with_the_sdk_client(project):
    root, db = project
    params = StdioServerParameters(command=FLOWCTL, args=["mcp", "--root", str(root), "--db", db],
                                   env=dict(os.environ))

    async def go():
        async with Client(params) as client:
            return await exercise(client)

    got = asyncio.run(asyncio.wait_for(go(), 120))
    store = open_store(db)
    try:
        check(got, store, "local:mcp")  # a name no API key can take (a key named mcp is key:mcp)
    finally:
        store.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mcp_over_streamable_http_needs_a_key_and_records_its_name(project):
    root, db = project
    store = open_store(db, create=True)
    _, key = keys_of(store).create("agent", ("invoke:get_order", "invoke:refund", "invoke:wipe", "runs:write"))
    _, weak = keys_of(store).create("weak", ("invoke:get_order",))
    port = _free_port()
    proc = subprocess.Popen([FLOWCTL, "mcp", "--transport", "http", "--port", str(port), "--root", str(root),
                             "--db", db], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "flowctl mcp --transport http did not listen"
                time.sleep(0.1)

        async def connect(k):
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {k}"}, timeout=60)
            async with http, streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    if k == weak:
                        return await session.call_tool("refund", {"amount": 5})
                    return await exercise(session)

        got = asyncio.run(asyncio.wait_for(connect(key), 120))
        refused = asyncio.run(asyncio.wait_for(connect(weak), 60))
    finally:
        proc.terminate()
        proc.wait(20)
    try:
        check(got, store, "key:agent")
        assert refused.is_error and "lacks the scope 'invoke:refund'" in refused.content[0].text
        from flowctl.store.servicelog import log_of

        denied = log_of(store).session("access")
        assert denied and denied[-1]["caller"] == "weak" and denied[-1]["outcome"] == "forbidden"
    finally:
        store.close()


def test_mcp_over_http_holds_each_key_to_its_request_rate_as_serve_does(project):
    """(break-it finding: ``flowctl mcp --transport http`` checked the key and its scope itself and
    never took a token of the key's rate: a key sent to ``flowctl serve`` at most ``--rate``
    requests per second had every MCP tool call served, each a recorded session step.) A call past
    the rate is refused RATE_LIMITED and the refusal recorded with the key's name, as serve does."""
    from types import SimpleNamespace

    import flowctl
    from flowctl.server.app import Service
    from flowctl.server.mcp import Bridge
    from flowctl.store.servicelog import log_of

    root, db = project
    store = open_store(db, create=True)
    try:
        _, key = keys_of(store).create("agent", ("invoke:get_order",))
        service = Service(flowctl.load_project(root), store, rate=0.001, burst=2)
        bridge = Bridge(service, http=True)
        ctx = SimpleNamespace(request=SimpleNamespace(headers={"authorization": f"Bearer {key}"},
                                                      client=SimpleNamespace(host="10.0.0.7")))
        answers = [bridge.call(ctx, "get_order", {"order_id": str(i)}) for i in range(3)]
        assert [a.is_error for a in answers] == [False, False, True], [a.content[0].text for a in answers]
        assert answers[2].content[0].text.startswith("RATE_LIMITED")
        rows = log_of(store).session("access")
        assert [(r["caller"], r["outcome"]) for r in rows] == [("agent", "rate_limited")]
        service.lane.close()
    finally:
        store.close()


def test_a_flow_run_over_mcp_answers_its_output_and_error_redacted_by_value(tmp_path):
    """(breaker finding: the output and error of a flow run over MCP were the engine's in-memory
    result, redacted by field name only: a secret quoted under another name came back in plaintext)"""
    import json

    import flowctl
    from flowctl.server.app import Service
    from flowctl.server.mcp import Bridge
    from support.serverkit import make_declining_project

    card = "4111-2222-3333-4444"
    store = open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    try:
        service = Service(flowctl.load_project(make_declining_project(tmp_path)), store)
        bridge = Bridge(service)
        ok = bridge.call(None, "flow.charge", {"card": card, "cvv": "737", "decline": False})
        failed = bridge.call(None, "flow.charge", {"card": card, "cvv": "737", "decline": True})
        ok_text, failed_text = ok.content[0].text, failed.content[0].text
        assert not ok.is_error and json.loads(ok_text)["status"] == "succeeded"
        receipt = json.loads(ok_text)["output"]["receipt"]  # (a run id may hold 737: the fields are looked at)
        assert "charged card" in receipt and card not in receipt and "737" not in receipt, ok_text
        assert failed.is_error and "declined" in failed_text and card not in failed_text, failed_text
        assert "737" not in failed_text.partition("declined")[0].partition("card")[2], failed_text
        service.lane.close()
    finally:
        store.close()
