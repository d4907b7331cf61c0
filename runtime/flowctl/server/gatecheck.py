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
neither recorded nor counted. What is kept of the input is its digest, and the reason with the
contract's ``sensitive`` fields' values redacted (withheld when the input holds more than
:data:`MAX_REDACTED` of them: redaction costs per value); a reason may quote the value a schema or an
``allow`` check rejected, so it is cut to :data:`REASON_CHARS` characters (recorded and answered
alike: a check adds a few KB to the store at most, whatever the body held), and a NUL in it is
written ``\\u0000``, as JSON writes it (PostgreSQL's text cannot hold one).
"""
from __future__ import annotations

import contextlib
import time

from flowctl.definition.runtime_schemas import check_instance
from flowctl.engine.sensitive import Secrets
from flowctl.errors import StoreError, first_line
from flowctl.gate.policy import Decision, Gate, function_aliases, input_digest
from flowctl.store.compiled import cursor_of
from flowctl.store.counters import admit_sql, record_sql
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
        import difflib

        near = difflib.get_close_matches(tool.partition("@")[0], list(service.project.contracts), n=1)
        also = f"; did you mean '{near[0]}'?" if near else ""  # (new-user finding: the CLI said so, the API did not)
        return Decision("deny", rule="unknown-tool", reason=f"no contract matches '{tool}' (default deny){also}"), None
    if contract.input_schema:
        problem = check_instance(contract.input_schema, tool_input)
        if problem:
            return Decision("deny", rule="input-schema", reason=f"the input does not match the input_schema of "
                                                                f"{contract.ref} {problem}"), contract
    return None, contract


def check(service, caller, tool: str, tool_input, session: str | None, dry_run: bool) -> dict:
    """The gate's answer as the API returns it (:class:`flowctl.server.models.GateDecision`):
    :func:`check_many` of one check; its error raised."""
    out = check_many(service, [(caller, tool, tool_input, session, dry_run)])[0]
    if isinstance(out, BaseException):
        raise out
    return out


class Busy(Exception):
    """The store's write lock was not free at once (:func:`check_many` with ``nowait``): nothing
    was decided or written; ask again where waiting is allowed (the gate's lane)."""


def check_many(service, checks, nowait: bool = False) -> list:
    """The answers to ``checks`` (``[(caller, tool, input, session or None, dry_run)]``), in order:
    each a :class:`~flowctl.server.models.GateDecision` dict, or the exception that check raised.

    On a SQL store the real checks (not ``dry_run``) are **one write transaction**: each one's
    gate-log count-and-record of an allowed call (``gate_log``) and its service-log row commit
    together (:class:`_Joined`), each in a savepoint of its own, so a check that fails is undone
    alone (nothing of it counted or logged) and the others are kept; the answers are returned only
    once that transaction has committed. The checks are decided in order, so a ``rate`` or
    ``dedupe`` sees the calls allowed before it in the same transaction. On SQLite the transaction
    is queued on the process's :func:`~flowctl.store.servicelog.write_lock` and runs on the gate's
    own connection (:func:`_sqlite_transaction`); on PostgreSQL each check is a transaction of its
    own (they commit in parallel; those of one session queue on its lock,
    :func:`~flowctl.store.servicelog.session_lock_key`).

    ``nowait`` (SQLite; the event loop's attempt, :mod:`flowctl.server.gatefront`): raise
    :class:`Busy` instead of waiting when the write lock is held, by a thread of this process or by
    another process; dry runs are then decided in the same transaction (their counts need it too)."""
    out: list = [None] * len(checks)
    joined = []
    sql = hasattr(service.log, "append_in") and hasattr(service.store, "_begin")
    for k, (caller, tool, tool_input, session, dry_run) in enumerate(checks):
        session = session or caller.name
        if not sql or (dry_run and not nowait):
            out[k] = _alone(service, caller, tool, tool_input, session, dry_run)
        else:
            joined.append((k, (caller, tool, tool_input, session, dry_run)))
    groups = [joined] if joined and not service.store.pg else [[one] for one in joined]
    for group in groups:
        for k, answer in _together(service, group, nowait):
            out[k] = answer
    return out


def _alone(service, caller, tool, tool_input, session, dry_run):
    try:
        return _check(service, caller, tool, tool_input, session, dry_run, None)[0]
    except Exception as exc:  # noqa: BLE001 - handed to its own caller
        return exc


def _together(service, group, nowait: bool) -> list:
    """``[(index, answer or exception)]`` of ``group``'s checks, written in one transaction (a
    savepoint each when there are several). Raises :class:`Busy` (``nowait``) before anything."""
    store, log = service.store, service.log
    for attempt in range(5):
        answers, rows = [], []
        try:
            with _transaction(service, nowait) as conn:
                if len(group) == 1:
                    (k, (caller, tool, tool_input, session, dry_run)), = group
                    answer, row = _check(service, caller, tool, tool_input, session, dry_run, conn)
                    answers.append((k, answer))
                    rows.append(row)
                else:
                    cur = cursor_of(conn)  # savepoints as plain SQL
                    for k, (caller, tool, tool_input, session, dry_run) in group:
                        cur.execute("SAVEPOINT flowctl_check")
                        try:
                            answer, row = _check(service, caller, tool, tool_input, session, dry_run, conn)
                            rows.append(row)
                        except SeqTaken:
                            raise
                        except Exception as exc:  # noqa: BLE001 - this check's own failure: undone alone
                            cur.execute("ROLLBACK TO flowctl_check")
                            answer = exc
                        cur.execute("RELEASE flowctl_check")
                        answers.append((k, answer))
        except Busy:
            raise
        except SeqTaken:  # another writer took a session's next seq: all of it again (tails re-read)
            continue
        except Exception as exc:  # noqa: BLE001 - the transaction failed: nothing of any of them was kept
            if isinstance(exc, store.engine.dialect.dbapi.Error):  # a statement of the driver's own
                exc = StoreError(f"cannot write to {store.safe_url}: {type(exc).__name__}: {first_line(exc)}",
                                 hint="nothing of this check was kept")
            return [(k, exc) for k, _ in group]
        for row in rows:
            if row is not None:
                log.committed(row)  # its session's tail, now durable
        return answers
    sessions = ", ".join(sorted({repr(one[1][3]) for one in group}))
    return [(k, StoreError(f"session {sessions}'s next number kept being taken by another writer (5 tries); "
                           "nothing of this check was kept")) for k, _ in group]


def _transaction(service, nowait: bool):
    store = service.store
    if store.pg:
        return store._begin()
    return _sqlite_transaction(service, nowait)


@contextlib.contextmanager
def _sqlite_transaction(service, nowait: bool):
    """A write transaction on the gate's own SQLite connection (opened once, detached from the
    pool; the store's pragmas applied), under the process's write lock: ``BEGIN IMMEDIATE`` …
    ``COMMIT``, rolled back when the block raises. ``nowait``: :class:`Busy` at once when the lock
    or SQLite's write lock is taken (SQLite's busy timeout 0 for this attempt)."""
    lock = write_lock(service.store)
    if not lock.acquire(blocking=not nowait):
        raise Busy("the write lock is held by another thread of this process")
    try:
        conn = service.__dict__.get("_gate_conn")
        if conn is None:
            proxied = service.store.engine.raw_connection()  # the connect hooks ran: WAL, busy timeout
            proxied.detach()  # the gate's own from now on
            conn = service.__dict__["_gate_conn"] = proxied.dbapi_connection
        timeout = 0 if nowait else BUSY_TIMEOUT_MS
        if service.__dict__.get("_gate_timeout") != timeout:
            conn.execute(f"PRAGMA busy_timeout={timeout}")
            service.__dict__["_gate_timeout"] = timeout
        try:
            conn.execute("BEGIN IMMEDIATE")
        except service.store.engine.dialect.dbapi.OperationalError as exc:
            if nowait and "locked" in str(exc):
                raise Busy("another process holds the store's write lock") from None
            raise
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):  # no transaction left to roll back
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):  # a failed COMMIT leaves the transaction open
                conn.execute("ROLLBACK")
            raise
    finally:
        lock.release()


def close(service) -> None:
    """Close the gate's own SQLite connection, if one was opened (the server's shutdown)."""
    conn = service.__dict__.pop("_gate_conn", None)
    if conn is not None:
        conn.close()


#: characters of a decision's reason, at most, as recorded and answered: a schema's or an allow
#: check's message quotes the value it rejects, which may be most of a 1 MiB body
REASON_CHARS = 2000

#: distinct values under a contract's sensitive fields a check's reason is redacted of, at most
#: (past it the reason is withheld)
MAX_REDACTED = 1000

#: SQLite's busy timeout for the gate's connection when it may wait (the store's own: 30 s)
BUSY_TIMEOUT_MS = 30000


class _Joined:
    """The store as the gate sees it during one recorded check: ``gate_admit`` and ``gate_record``
    run in the check's transaction ``conn``; everything else is the store's own."""

    def __init__(self, store, conn):
        self._store, self._conn = store, conn

    def __getattr__(self, name):
        return getattr(self._store, name)

    def gate_admit(self, tools, limits, entry=None):
        return admit_sql(self._store, self._conn, tools, limits, entry)

    def gate_record(self, entry: dict) -> None:
        record_sql(self._store, cursor_of(self._conn), entry)


class _Seen(Secrets):
    """The values under ``fields`` in an input, found by :class:`Secrets`' own walk but not learnt
    (no escaped forms made): ``seen``, in order, repeats included."""

    def __init__(self, fields):
        self.seen: list = []
        super().__init__(fields)

    def add(self, v) -> None:
        self.seen.append(v)


def _redacted(contract, tool_input, reason: str) -> str:
    """``reason`` with the values under ``contract``'s sensitive names redacted; past
    :data:`MAX_REDACTED` distinct values, withheld (each value costs its eight escaped forms and a
    place in one pattern: 100,000 of them took seconds, on the event loop the front answers on)."""
    seen = _Seen(contract.sensitive)
    seen.learn(tool_input)
    values = [v for _, v in dict.fromkeys((type(v), v) for v in seen.seen)]  # 1, 1.0 and True apart
    if not values:
        return reason
    if len(values) > MAX_REDACTED:
        return (f"the reason is withheld: the input holds more than {MAX_REDACTED} values under {contract.ref}'s "
                "sensitive fields, too many to redact one by one")
    secrets = Secrets(contract.sensitive, values)
    return secrets.text(reason) if secrets.values else reason


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
    reason = decision.reason
    if contract is not None and contract.sensitive:  # the sensitive fields' values redacted from the reason
        reason = _redacted(contract, tool_input, reason)
    if "\x00" in reason:  # a key of the input quoted as it is (at /a\x00b): as the log keeps it (servicelog.kept),
        reason = reason.replace("\x00", "\\u0000")  # so a dry run's answer and a real one's are the record
    if len(reason) > REASON_CHARS:  # cut after redaction: a secret is never cut out of its own redaction
        reason = reason[:REASON_CHARS - 1] + "…"
    ref = contract.ref if contract is not None else tool
    seq = row = None
    if not dry_run:
        record = {"at": time.time(), "caller": caller.name, "kind": "gate_check", "tool": ref, "digest": digest,
                  "outcome": decision.outcome, "policy": decision.policy, "rule": decision.rule, "reason": reason}
        row = service.log.append(session, record) if conn is None else service.log.append_in(conn, session, record)
        seq = row["seq"]
    return {"decision": decision.outcome, "tool": ref, "policy": decision.policy, "rule": decision.rule,
            "reason": reason, "session": session, "seq": seq, "dry_run": dry_run, "caller": caller.name}, row


__all__ = ["Busy", "check", "check_many", "close", "refusal"]
