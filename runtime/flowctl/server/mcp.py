"""``flowctl mcp``: the project's contracts and flows as Model Context Protocol tools (issue 19).

Built on the official ``mcp`` Python SDK's low-level :class:`mcp.server.Server` (the ``flowctl[mcp]``
extra), over stdio or streamable HTTP (:func:`serve_stdio`, :func:`http_app`).

* **Contracts** are tools named by their contract id (the newest version; ``refund_payment``):
  ``inputSchema`` is the contract's ``input_schema`` (``{"type": "object"}`` when it has none);
  ``annotations``: ``readOnlyHint`` when the contract declares no ``side_effects``;
  ``destructiveHint`` when it does and its effects cannot be compensated (``compensate: none``) or
  one of them is a delete; ``idempotentHint`` when it has an ``idempotency_key``. A call is a
  session invoke (:meth:`flowctl.server.sessions.Sessions.invoke`): the contract's input schema,
  the default-deny gate, the idempotency key, verify, the saga and the audit log, exactly as
  ``POST /v1/sessions/{id}/tools/{tool}/invoke``. **One MCP connection is one session**, opened
  at its first contract call (its run's flow is ``session:mcp-<caller>``).
* **Flows** are tools named ``flow.<flow id>`` (``inputSchema`` the flow's ``input_schema``): a call
  runs the flow in this process (:meth:`flowctl.engine.engine.Engine.run`) and answers with its end;
  a run that pauses for a review answers that it is waiting, for which decisions, and how a human
  decides it (``flowctl resume`` with the token a reviewer gets from ``notify``, or ``POST
  /v1/reviews/{id}/decide`` with a ``reviews`` key) — never the token itself, which would let the
  model approve its own call.
* A denial (or a call its review rejected, or a tool that failed) is a tool result with
  ``isError: true`` whose text is the decision's rule and reason, so the model can read it. A call
  a policy sends to review answers (not as an error) that it waits: ``status: review``, the review
  id, decisions, deadline and how a human decides it; the model calls the tool again with the same
  arguments after the decision (the session invoke's 202, :mod:`flowctl.server.sessions`).

Who calls: over **stdio** the client launched this process as the local user, so it is trusted as
that user's ``flowctl`` command is: the caller is ``mcp`` with every scope. Over **HTTP** every call
needs ``Authorization: Bearer fck_…`` (a key of ``flowctl keys create``): a contract needs the key's
``invoke:<tool>`` scope, a flow ``runs:write`` (``admin`` has all); without one the call is an
error result naming the scope, and past the key's request rate (``flowctl serve``'s default: 50 per
second, bursts of 100) ``RATE_LIMITED``; each refusal is recorded in the service log as ``serve`` records it.
"""
from __future__ import annotations

import json
import threading
import time

import anyio
import mcp_types as types
from mcp.server import Server

from flowctl.errors import FlowctlError
from flowctl.server.auth import Caller, authorize
from flowctl.server.views import outcome, secrets_of, stored

FLOW_PREFIX = "flow."
#: The caller of a stdio connection: the local user who launched ``flowctl mcp``.
LOCAL = Caller("mcp", ("admin",), "", local=True)


def _object_schema(schema) -> dict:
    if isinstance(schema, dict) and schema.get("type") == "object":
        return dict(schema)
    return {"type": "object"}


def annotations_of(contract) -> types.ToolAnnotations:
    """``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint`` of a contract (see the module)."""
    effects = tuple(contract.side_effects or ())
    kinds = " ".join(str(e.get("type", "")) if isinstance(e, dict) else str(e) for e in effects)
    destructive = bool(effects) and (not contract.compensate or contract.compensate == "none" or "delete" in kinds)
    return types.ToolAnnotations(title=contract.id, read_only_hint=not effects,
                                 destructive_hint=destructive if effects else False,
                                 idempotent_hint=bool(contract.idempotency_key), open_world_hint=bool(effects))


def tools_of(project) -> list:
    """The MCP tools of ``project``: one per contract id (newest version), one per flow."""
    out = []
    for cid in sorted(project.contracts):
        contract = project.resolve_tool(cid)
        if contract is None:
            continue
        desc = (getattr(contract, "description", "") or f"flowctl contract {contract.ref}").strip()
        out.append(types.Tool(name=cid, description=desc, input_schema=_object_schema(contract.input_schema),
                              annotations=annotations_of(contract)))
    for fid in sorted(project.flows):
        flow = project.flows[fid]
        desc = (flow.description or f"run the flowctl flow {fid}").strip()
        out.append(types.Tool(name=FLOW_PREFIX + fid, description=desc + " (starts a run; may wait for a review)",
                              input_schema=_object_schema(flow.input_schema),
                              annotations=types.ToolAnnotations(title=f"flow {fid}", read_only_hint=False,
                                                                destructive_hint=False, open_world_hint=True)))
    return out


def _text(result: dict | str, error: bool = False) -> types.CallToolResult:
    text = result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)
    structured = result if isinstance(result, dict) else None
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured, is_error=error)


class Bridge:
    """What one ``flowctl mcp`` process serves: the :class:`~flowctl.server.app.Service` of the
    project, and the flowctl session of each MCP connection."""

    def __init__(self, service, *, http: bool = False):
        self.service = service
        self.http = http
        self.sessions: dict = {}  # the connection (see session_of) -> flowctl session id
        self._lock = threading.Lock()

    def caller(self, ctx, needed: str) -> Caller:
        """Who calls (see the module): :func:`flowctl.server.auth.authorize`, as every ``flowctl
        serve`` endpoint's key, scope and per-key rate (one token a call); raises ``AccessError``,
        ``ScopeError`` or ``RateLimited``, the refusal recorded."""
        if not self.http:
            return LOCAL
        request = getattr(ctx, "request", None)
        header = request.headers.get("authorization", "") if request is not None else ""
        scheme, _, key = header.partition(" ")
        token = key.strip() if scheme.lower() == "bearer" else ""
        client = getattr(request, "client", None)
        return authorize(self.service, token or None, needed, {"method": "mcp", "path": "tools/call"},
                         client.host if client else "")

    def session_of(self, ctx, caller) -> str:
        """The flowctl session of this MCP connection: the process's one over stdio; over HTTP the
        one of the ``Mcp-Session-Id`` the SDK's session manager issued (else one per key)."""
        key = "stdio"
        if self.http:
            request = getattr(ctx, "request", None)
            sid = request.headers.get("mcp-session-id") if request is not None else None
            key = ("mcp", sid) if sid else ("key", caller.name)
        with self._lock:
            found = self.sessions.get(key)
            if found is None:
                found = self.sessions[key] = self.service.sessions.open(caller, f"mcp-{caller.name}"[:40])["session"]
        return found

    def call(self, ctx, name: str, arguments) -> types.CallToolResult:
        """One ``tools/call`` (blocking: run in a worker thread)."""
        arguments = arguments or {}
        try:
            if name.startswith(FLOW_PREFIX) and name[len(FLOW_PREFIX):] in self.service.project.flows:
                return self._flow(self.caller(ctx, "runs:write"), name[len(FLOW_PREFIX):], arguments)
            if name not in self.service.project.contracts:
                return _text(f"unknown tool '{name}': no contract or flow of this project has that name", True)
            caller = self.caller(ctx, f"invoke:{name}")
            out = self.service.sessions.invoke(caller, self.session_of(ctx, caller), name, arguments)
        except FlowctlError as exc:
            return _text(f"{exc.code}: {exc.message or exc}" + (f" ({exc.hint})" if exc.hint else ""), True)
        if out["status"] == "succeeded":
            output = out["output"]
            return _text(output if isinstance(output, dict) else {"result": output})
        d = out.get("decision") or {}
        if out["status"] == "failed":
            e = out.get("error") or {}
            return _text(f"{name} failed: {e.get('type')}: {e.get('message')}", True)
        why = f"{d.get('policy') or 'the gate'} ({d.get('rule')}): {d.get('reason')}"
        if out["status"] == "review":  # not an error: the call waits; the same call again once decided
            r = out["review"]
            return _text({"tool": name, "status": "review", "waiting": "review", "review_id": r["id"],
                          "decisions": r["decisions"], "deadline": r["deadline"], "reason": why,
                          "how": f"{name} was not called yet: it waits for a human review ({why}). {r['how']}; "
                                 "call this tool again with the same arguments after the decision"})
        if out["status"] == "rejected":
            return _text(f"{name} denied: {d.get('reason')} (rule {d.get('rule')}); it was not called", True)
        return _text(f"{name} denied by {why}", True)

    def _flow(self, caller, flow_id: str, arguments) -> types.CallToolResult:
        result = self.service.engine.run(flow_id, arguments)
        self.service.log.append(caller.name, {"at": time.time(), "caller": caller.name, "kind": "run_submitted",
                                              "data": {"run_id": result.run_id, "flow": flow_id, "via": "mcp"}})
        out = {"run_id": result.run_id, "flow": flow_id, "status": result.status}
        if result.status == "succeeded":  # the stored output: redacted by value (the result's is not)
            row = stored(self.service.store, result)
            out["output"] = secrets_of(self.service.project, row).scrub(row.get("output")) if row is not None \
                else secrets_of(self.service.project, self.service.store.get_run(result.run_id)).scrub(result.output)
            return _text(out)
        if result.status == "paused" and result.review:
            r = result.review
            out.update(waiting="review", state=r.get("state"), decisions=list(r.get("decisions") or ()),
                       how=f"a reviewer decides it: flowctl resume {result.run_id} --token TOKEN --decision "
                           f"{'|'.join(r.get('decisions') or ())}, or POST /v1/reviews/{result.run_id}/decide "
                           "with a reviews key; then the run continues")
            return _text(out)
        if result.status in ("paused", "waiting"):
            out["waiting"] = result.status
            out["how"] = f"the run continues on its own (flowctl recover / a worker); follow it: flowctl trace {result.run_id}"
            return _text(out)
        out["error"] = outcome(self.service.project, result, self.service.store)["error"]
        return _text(out, True)


def build(service, *, http: bool = False) -> Server:
    """The MCP server (low-level SDK :class:`~mcp.server.Server`) of ``service``'s project."""
    from flowctl import __version__

    bridge = Bridge(service, http=http)
    listed = tools_of(service.project)

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params):
        return await anyio.to_thread.run_sync(bridge.call, ctx, params.name, params.arguments)

    server = Server("flowctl", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool,
                    instructions="flowctl: every tool call passes the project's policy gate and is recorded; "
                                 "a denied call is an error result naming the rule and the reason.")
    server.bridge = bridge
    return server


async def serve_stdio(service) -> None:
    """Serve ``service`` over stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build(service)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(service, host: str = "127.0.0.1"):
    """The streamable-HTTP ASGI app (``/mcp``) of ``service``."""
    return build(service, http=True).streamable_http_app(host=host)


__all__ = ["Bridge", "FLOW_PREFIX", "LOCAL", "annotations_of", "build", "http_app", "serve_stdio", "tools_of"]
