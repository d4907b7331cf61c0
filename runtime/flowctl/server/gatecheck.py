"""``POST /v1/gate/check``: the engine's gate, asked by a caller outside any run.

The answer is what a task state calling the same tool with the same input would get, in the same
order (:func:`flowctl.engine.calls.call_tool`, then :func:`flowctl.engine.gatecall.gate`):

1. no contract matches the reference: ``deny`` (rule ``unknown-tool``: default deny);
2. the input does not satisfy the contract's ``input_schema``: ``deny`` (rule ``input-schema``; a
   run fails such a call with ``SchemaMismatch`` before the gate is asked);
3. :meth:`flowctl.gate.policy.Gate.decide`, following the function as the engine does (the
   policies of every contract on the same entrypoint, or on the same resolved function object:
   :func:`~flowctl.gate.policy.function_aliases`). The session stands where a run would: ``rate
   per: run`` and ``dedupe`` count per session of the calling key (:func:`gate_run_id`: a session
   is never a run, and a caller choosing a new session gets a new per-run budget, so limits meant
   for every caller are ``per: tool`` or ``per: flow``), and ``allow`` checks see ``run.id`` =
   ``gate:<key>:<session>``,
   ``flow`` = ``''``, and empty ``run_input``, ``params`` and ``context`` — a caller cannot supply
   the run data a policy trusts.

A real check (not ``dry_run``) that is allowed is counted by the policies' ``rate`` and ``dedupe``
(the gate log, as a run's call is), and every real check is appended to the service log with the
caller and the session's next sequence number (:mod:`flowctl.store.servicelog`); on a SQL store
both in one transaction, committed before the answer (on SQLite queued on the process's
:func:`~flowctl.store.servicelog.write_lock`). A dry run is
neither recorded nor counted. What is kept never holds the input: its digest, and the reason with
the contract's ``sensitive`` fields' values redacted.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from flowctl.definition.runtime_schemas import check_instance
from flowctl.engine.sensitive import Secrets
from flowctl.errors import StoreError
from flowctl.gate.policy import Decision, Gate, function_aliases, input_digest
from flowctl.store.servicelog import SeqTaken, write_lock


def _aliases(service, contract) -> tuple:
    """Other contract ids whose entrypoint resolves to the function ``contract`` runs (cached)."""
    cache = service.aliases
    if contract.ref not in cache:
        engine = service.engine
        folder = str(service.project.orchestration / "tools")
        try:
            fn = engine.tool_function(contract, "entrypoint", folder)
            found = tuple(i for i in function_aliases(engine, service.project, fn, folder) if i != contract.id)
        except Exception:  # noqa: BLE001 - unimportable: only the entrypoint name ties it to others
            found = ()
        cache[contract.ref] = found
    return cache[contract.ref]


def refusal(service, tool: str, tool_input) -> tuple:
    """``(Decision or None, contract or None)``: the denial a call gets before the gate is asked
    (rules 1 and 2 above), or None and the contract the gate decides for."""
    contract = service.project.resolve_tool(tool)
    if contract is None:
        return Decision("deny", rule="unknown-tool", reason=f"no contract matches '{tool}' (default deny)"), None
    if contract.input_schema:
        problem = check_instance(contract.input_schema, tool_input)
        if problem:
            return Decision("deny", rule="input-schema", reason=f"the input does not match the input_schema of "
                                                                f"{contract.ref} {problem}"), contract
    return None, contract


class Lane:
    """Where the gate route's blocking work runs: ``await lane.run(fn)`` is ``fn()`` called on
    another thread. On a SQLite store that is **one** thread kept for the gate: its writes are
    serialised anyway (one writer at a time), and a hop to it costs less than one through
    FastAPI's shared thread pool (capacity limiter, cancel scope), which the other endpoints keep
    to themselves. On PostgreSQL, where checks of different functions commit in parallel, it is
    that thread pool. ``close()`` stops the thread (the server's shutdown)."""

    def __init__(self, store):
        self._pool = None if getattr(store, "pg", False) else ThreadPoolExecutor(1, thread_name_prefix="flowctl-gate")

    async def run(self, fn):
        if self._pool is None:
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(fn)
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def check(service, caller, tool: str, tool_input, session: str | None, dry_run: bool) -> dict:
    """The gate's answer as the API returns it (:class:`flowctl.server.models.GateDecision`).

    On a SQL store a real check is **one write transaction**: the gate's count-and-record of an
    allowed call (``gate_log``) and the service-log row commit together (:class:`_Joined`), so a
    check costs one commit, and a check that fails to be logged is not counted either."""
    session = session or caller.name
    if not dry_run and hasattr(service.log, "append_in") and hasattr(service.store, "_begin"):
        for attempt in range(5):
            try:
                with write_lock(service.store), service.store._begin() as conn:
                    out, row = _check(service, caller, tool, tool_input, session, False, conn)
                service.log.committed(row)  # its session's tail, now durable
                return out
            except SeqTaken:  # another writer took the session's next seq: all of it again
                if attempt == 4:
                    raise StoreError(f"session {session!r}'s next number kept being taken by another writer "
                                     "(5 tries); nothing of this check was kept") from None
    return _check(service, caller, tool, tool_input, session, dry_run, None)[0]


class _Joined:
    """The store as the gate sees it during one recorded check: ``gate_admit`` and ``gate_record``
    run in the check's transaction ``conn``; everything else is the store's own."""

    def __init__(self, store, conn):
        self._store, self._conn = store, conn

    def __getattr__(self, name):
        return getattr(self._store, name)

    def gate_admit(self, tools, limits, entry=None):
        from flowctl.store.counters import admit_sql

        return admit_sql(self._store, self._conn, tools, limits, entry)

    def gate_record(self, entry: dict) -> None:
        self._conn.execute(self._store.t.gate_log.insert(), entry)  # one compiled INSERT for every entry


def gate_run_id(caller, session: str) -> str:
    """What the gate counts a session's checks under: ``gate:<key name>:<session>``. Namespaced by
    the key, and holding a ``:`` no run id has, so a caller can neither spend a real run's ``rate
    per: run`` / ``dedupe`` budget nor another key's."""
    return f"gate:{caller.name}:{session}"


def _check(service, caller, tool, tool_input, session, dry_run, conn) -> tuple:
    """``(the answer, the service-log row written or None)``."""
    decision, contract = refusal(service, tool, tool_input)
    digest = input_digest(tool_input)
    if decision is None:
        gate = service.gate if conn is None else Gate(service.project, _Joined(service.store, conn), service.gate.clock)
        decision = gate.decide(contract, tool_input, run_id=gate_run_id(caller, session), flow="", record=not dry_run,
                               digest=digest, run_input=None, params={}, context={},
                               also=_aliases(service, contract))
    secrets = Secrets(contract.sensitive if contract is not None else ())
    secrets.learn(tool_input)
    reason = secrets.text(decision.reason) if secrets.values else decision.reason
    ref = contract.ref if contract is not None else tool
    seq = row = None
    if not dry_run:
        record = {"at": time.time(), "caller": caller.name, "kind": "gate_check", "tool": ref, "digest": digest,
                  "outcome": decision.outcome, "policy": decision.policy, "rule": decision.rule, "reason": reason}
        row = service.log.append(session, record) if conn is None else service.log.append_in(conn, session, record)
        seq = row["seq"]
    return {"decision": decision.outcome, "tool": ref, "policy": decision.policy, "rule": decision.rule,
            "reason": reason, "session": session, "seq": seq, "dry_run": dry_run, "caller": caller.name}, row


__all__ = ["Lane", "check", "refusal"]
