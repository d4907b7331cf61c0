"""The per-step commit on a held DBAPI connection: SQL compiled once, no SQLAlchemy per step.

:meth:`flowctl.store.sql.SqlStore.commit` runs once per step of every durable run. Through
SQLAlchemy Core each commit paid for a pool checkout, a ``begin`` event, statement cache keys and
result set-up: several times the cost of the SQL itself. :class:`HotPath` does the same writes with
the same conditions on DBAPI connections of its own (detached from SQLAlchemy's pool; one per
commit in flight, at most :data:`MAX_IDLE` kept idle):

* the run-row UPDATE (optimistic ``last_seq`` fence, worker fencing token and lease, database
  clock) is the very statement :class:`~flowctl.store.sql.SqlStore` builds, compiled once per set of
  columns by SQLAlchemy into SQL text and a parameter order;
* **SQLite**: ``BEGIN IMMEDIATE``; UPDATE; the INSERT of the step's packed event row (schema 7:
  one row per commit, :func:`flowctl.store.audit.seal_commit`; one per event for events sealed
  one by one); ``COMMIT`` —
  WAL with ``synchronous=NORMAL`` as before: a committed step survives a crash of the process;
  the last commits before an OS crash or power loss may be lost (SQLite's documented trade-off);
* **PostgreSQL**: one statement, sent in autocommit mode — the UPDATE in a data-modifying CTE
  and the events inserted from it (``WITH r AS (UPDATE … RETURNING id) INSERT … SELECT … FROM r,
  (VALUES …)``), so a step costs one round trip instead of four (BEGIN, UPDATE, INSERT, COMMIT).
  A single statement is atomic and, with ``synchronous_commit=on`` (the default), returns only
  after its WAL record is flushed. The statement text depends only on the column set and the
  number of events, so psycopg prepares it server-side after a few executions.

**Group commit** (SQLite, issue 17 target 2b): the commits that arrive while a transaction is being
written (the runs a worker drives at once, each in its thread) are written together in the next
one, each in a savepoint of its own; every caller returns only once that transaction has committed,
and one commit's failure (its UPDATE matched no row, a statement failed) undoes only its own
savepoint. SQLite has one writer at a time anyway: several runs' steps then cost one ``BEGIN
IMMEDIATE`` … ``COMMIT`` (one WAL append) instead of one each, and no thread sleeps in SQLite's
busy handler waiting for another's lock.

A group is written in as few statements as its commits allow (issue 17 target 3a): each statement
lets go of the GIL and waits to take it back, and while the group's transaction is open every
other commit waits, so with a fan-out's threads committing at once the statements of the leader
are what a child costs. So the group is first written without savepoints; each commit's UPDATE
(and a new run's INSERT) runs as it comes, and what only adds to the store is kept and written for
the whole group in one statement each: the event rows, the ledger rows (one read of the ledger's
head, one write of it: :func:`flowctl.store.ledger.append`'s ``tx``, each run's head the one its
own statement wrote), the summaries and the parents' wake-ups. Only if one of its commits raises is
the transaction rolled back and the group written again, each commit in its savepoint, one
statement at a time (the commit that failed undone alone, as before). A map child's start, step
and end (the map benchmark's 8 threads, about 1.5 commits per transaction): 16 statements instead
of 23.

**Checkpoints off the commit path** (SQLite, issue 17 target 3a): SQLite checkpoints the WAL into
the database file (and syncs both, the only syncs ``synchronous=NORMAL`` makes) inside the
``COMMIT`` that takes the WAL past 1,000 pages: that commit, and every commit grouped with it,
waited for the syncs (about 17 ms on the benchmark machine, once per 60-odd steps). HotPath's
connections turn that off (``wal_autocheckpoint=0``) and a thread of its own runs the same PASSIVE
checkpoint every :data:`~flowctl.store.checkpoint.CHECKPOINT_EVERY` commits on its own connection, while the runs go on. As
often as before, so the WAL is synced as often as before: nothing a commit promised changes. If
the thread falls :data:`~flowctl.store.checkpoint.CHECKPOINT_LAG` commits behind, the committing thread checkpoints itself,
as SQLite would have (the WAL stays bounded). Other connections (SQLAlchemy's, other processes)
keep SQLite's automatic checkpoint.

:meth:`HotPath.commit` returns ``False`` when the conditioned UPDATE matched no row (nothing was
written; the caller explains why), else the run's ``pause_requested`` as the UPDATE left it (its
JSON text, or ``True`` when there is none): the UPDATE's own ``RETURNING``, so the step loop learns
of a pause request (:mod:`flowctl.engine.pause`) without a read of its own, raises :class:`~flowctl.errors.StoreError` when the database
fails, and is used only for commits with at most :data:`MAX_EVENTS` events and, on PostgreSQL,
without step records (the others keep the SQLAlchemy path). On SQLite a commit's step records (a
side-effecting call's ``started`` row, then its outcome) are upserted in its transaction, one
``INSERT … ON CONFLICT (run_id, step_no, attempt) DO UPDATE`` each.
"""
from __future__ import annotations

import threading

from flowctl.errors import StoreError
from flowctl.errors import first_line
from flowctl.store.checkpoint import CommitCheckpoints
from flowctl.store.records import EVENT_ROW
from flowctl.store.ledger import END_CTES_PG, flush
from flowctl.store.summary import UPSERT_CTE_PG, before_sql, reads_before, summary_row, upsert_sql, write_summary

MAX_IDLE = 4  # idle connections kept between commits
#: Every run UPDATE of a step hands back the run's pause request (schema 8, flowctl.engine.pause).
#: what every step's UPDATE returns: the run's pause request, and its cancel request (read by the
#: worker when the commit ended the run: :meth:`HotPath.cancel_at_end`, no read of its own)
_RETURNING = " RETURNING pause_requested, cancel_requested"
#: run ends whose cancel request is kept for :meth:`HotPath.cancel_at_end` (a process that never asks
#: forgets them all at this many: a miss only costs the worker a read)
ENDS_KEPT = 10_000
#: More events than this in one commit (a task retried inline thousands of times) take the
#: SQLAlchemy path: one statement carries 10 parameters per event, and PostgreSQL allows 65,535.
MAX_EVENTS = 1000
_EVENT_COLUMNS = EVENT_ROW
#: the parameters of :data:`~flowctl.store.summary.UPSERT_CTE_PG`, in summary_row's order
_SUMMARY_KEYS = ("s_run", "s_seq", "s_facts", "s_figures")
#: the primary key of ``flowctl_steps``: one row per attempt of a step
_STEP_KEY = ("run_id", "step_no", "attempt")
#: SQLite: the ended run's parent, waiting or running, due now (the statement
#: :meth:`flowctl.store.queue.QueueMethods._wake_parent` runs on SQLite)
WAKE_PARENT = ("UPDATE flowctl_runs SET available_at = (julianday('now') - 2440587.5) * 86400.0 "
               "WHERE id = (SELECT parent_id FROM flowctl_runs WHERE id = ?) AND status IN ('waiting', 'running')")
#: :data:`WAKE_PARENT` for the runs a group ended (``(?)``: as many marks as runs)
WAKE_PARENTS = ("UPDATE flowctl_runs SET available_at = (julianday('now') - 2440587.5) * 86400.0 "
                "WHERE id IN (SELECT parent_id FROM flowctl_runs WHERE id IN (?)) AND status IN ('waiting', 'running')")
#: rows per INSERT of the rows a group keeps (events, summaries) and wake-ups per UPDATE
FLUSH_ROWS = 100
# PostgreSQL types of the event columns: VALUES rows carry no column types of their own
_PG_TYPES = ("text", "integer", "double precision", "text", "text", "integer", "text", "text", "text", "integer",
             "integer")


class _Request:
    """One caller's commit in a group (:meth:`HotPath._grouped`): a run-row UPDATE with its event
    rows (``plan``), or any other write (``write(cursor)``, :meth:`HotPath.write`)."""

    __slots__ = ("plan", "params", "rows", "done", "result", "error", "ledger", "wake", "write", "summary", "steps")

    def __init__(self, plan, params, rows, ledger=None, wake=False, write=None, summary=None, steps=()):
        self.plan, self.params, self.rows, self.ledger, self.wake, self.write = plan, params, rows, ledger, wake, write
        self.summary, self.steps = summary, steps
        self.done, self.result, self.error = False, None, None


class HotPath:
    def __init__(self, store):
        self.store = store
        self.pg = store.pg
        self.max_events = MAX_EVENTS
        self._idle: list = []  # connections not in use, most recently used last
        self._lock = threading.Lock()
        self._sql: dict = {}
        self._insert_sql = None
        self._group = threading.Condition(threading.Lock())  # group commit (SQLite): the queue and its leader
        self._queue: list = []
        self._leading = False
        self._checkpoints = CommitCheckpoints(self._connect) if not self.pg else None
        self._ends: dict = {}  # run id -> its cancel request's text (or None) as the commit ending it returned

    def cancel_at_end(self, run_id: str):
        """``(True, text or None)``: the cancel request (its stored text) that the commit ending
        ``run_id`` found on the row, as its own ``RETURNING`` gave it; ``(False, None)`` when no
        commit of this path ended it (the caller reads the row instead). Forgotten once asked."""
        try:
            return True, self._ends.pop(run_id)
        except KeyError:
            return False, None

    def forget_end(self, run_id: str) -> None:
        """Drop what an earlier end of ``run_id`` returned: the run is being written again (redriven,
        or ended another way), so that answer no longer stands (breaker finding)."""
        if self._ends:
            self._ends.pop(run_id, None)

    def _ended(self, run_id: str, returned: list) -> None:
        if len(returned) == 1:
            if len(self._ends) >= ENDS_KEPT:
                self._ends.clear()
            self._ends[run_id] = returned[0][1]

    # ------------------------------------------------------------------ connections
    def _checkout(self):
        """A connection of our own: an idle one, or a new one (as many as commits run at once)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        conn = self._connect()
        if self.pg:
            conn.rollback()
            conn.autocommit = True  # each commit is one atomic statement
        else:
            conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpointed by CommitCheckpoints instead
        return conn

    def _connect(self):
        proxied = self.store.engine.raw_connection()  # runs the pool's connect hooks (SQLite pragmas)
        proxied.detach()  # ours: never handed to another pool user
        return proxied.dbapi_connection

    def _checkin(self, conn) -> None:
        """Keep at most :data:`MAX_IDLE` idle connections; close the others (a burst of fan-out
        threads must not leave a connection per thread open on the server)."""
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        _close(conn)

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)

    # ------------------------------------------------------------------ statements
    def _update(self, stmt, columns: tuple):
        """``(sql, compiled)`` of an UPDATE variant for this set of SET columns (cached)."""
        key = (id(stmt), columns)
        found = self._sql.get(key)
        if found is None:
            compiled = stmt.compile(dialect=self.store.engine.dialect, column_keys=list(columns))
            found = self._sql[key] = (str(compiled), compiled)
        return found

    def _positional(self, compiled) -> tuple:
        """``(names, constants)`` of a compiled statement's parameters, in SQL order: the values the
        caller passes by name, and those SQLAlchemy fixed when compiling (``julianday('now')`` …)."""
        key = ("positional", id(compiled))
        found = self._sql.get(key)
        if found is None:
            constants = {name: bind.value for name, bind in compiled.binds.items() if not bind.callable}
            found = self._sql[key] = (tuple(compiled.positiontup or ()), constants)
        return found

    def _sqlite_insert(self) -> str:
        if self._insert_sql is None:
            self._insert_sql = (f"INSERT INTO flowctl_events ({', '.join(_EVENT_COLUMNS)}) "
                                f"VALUES ({', '.join('?' * len(_EVENT_COLUMNS))})")
        return self._insert_sql

    def _step_upsert(self, columns: tuple) -> str:
        """SQLite: the upsert of one step row with these columns (``run_id``, ``step_no`` and
        ``attempt`` among them): inserted, or its other given columns set (cached per column set)."""
        key = ("step", columns)
        found = self._sql.get(key)
        if found is None:
            kept = [c for c in columns if c not in _STEP_KEY]
            found = self._sql[key] = (
                f"INSERT INTO flowctl_steps ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
                f"ON CONFLICT ({', '.join(_STEP_KEY)}) DO "
                + (f"UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in kept)}" if kept else "NOTHING"))
        return found

    def _pg_statement(self, stmt, columns: tuple, n_events: int, end: bool = False) -> tuple:
        """``(sql, compiled)`` of a commit's one statement: the UPDATE, its ``n_events`` event rows
        inserted from it and, with ``end``, the ledger's ``end`` row and the run's summary (cached)."""
        key = (id(stmt), columns, n_events, end)
        found = self._sql.get(key)
        if found is None:
            update, compiled = self._update(stmt, columns)
            if not n_events and not end:
                found = (update + _RETURNING, compiled)
            else:
                # the final SELECT hands back what _RETURNING does: the pause and cancel requests the
                # UPDATE left (no row: no match, and nothing else is written)
                ctes = [f"r AS ({update} RETURNING flowctl_runs.id, flowctl_runs.pause_requested, "
                        f"flowctl_runs.cancel_requested)"]
                if n_events:
                    rows = ", ".join(
                        "(" + ", ".join(f"%(e{i}_{c})s::{t}" for c, t in zip(_EVENT_COLUMNS, _PG_TYPES)) + ")"
                        for i in range(n_events))
                    cols = ", ".join(_EVENT_COLUMNS)
                    picked = ", ".join(f"v.{c}" for c in _EVENT_COLUMNS)
                    ctes.append(f"i AS (INSERT INTO flowctl_events ({cols}) SELECT {picked} FROM r CROSS JOIN "
                                f"(VALUES {rows}) AS v({cols}))")
                if end:
                    ctes += [END_CTES_PG.format(done="r"), UPSERT_CTE_PG.format(done="r")]
                found = (f"WITH {', '.join(ctes)} SELECT pause_requested, cancel_requested FROM r", compiled)
            self._sql[key] = found
        return found

    # ------------------------------------------------------------------ the commit
    def _plan(self, stmt, params: dict) -> tuple:
        """``(sql, names, constants)`` of the UPDATE ``stmt`` for ``params``' keys (cached): the SQL
        text, its parameters in SQL order and the values SQLAlchemy fixed when compiling."""
        key = (id(stmt), tuple(params))
        found = self._sql.get(key)
        if found is None:
            columns = tuple(k for k in params if not k.startswith("b_"))
            sql, compiled = self._update(stmt, columns)
            names, constants = self._positional(compiled)
            found = self._sql[key] = (sql + _RETURNING, compiled, columns, names, constants)
        return found

    def commit(self, stmt, params: dict, event_rows: list, *, ledger: str | None = None, wake: bool = False,
               summary: tuple | None = None, steps: list = ()):
        """Run the UPDATE ``stmt`` with ``params`` and insert ``event_rows`` (tuples in the order of
        ``_EVENT_COLUMNS``) atomically; on SQLite also upsert ``steps`` (step rows as the
        ``flowctl_steps`` columns they set, JSON columns as text, ``run_id`` included: a row
        already there keeps the columns a row does not name). ``ledger``: the id of a run this commit ends, whose ``end``
        row (:mod:`flowctl.store.ledger`) is appended in the same transaction, and its summary
        (``summary``: ``(first_seq, facts, last_seq)``, :func:`flowctl.store.summary.write_summary`)
        written (on PostgreSQL as common table expressions of the same one statement); with ``wake`` (SQLite only) its parent is made due (:data:`WAKE_PARENT`).
        False: the UPDATE matched no row, nothing was written; else
        the run's ``pause_requested`` text, or True when it has none.
        Returns (or raises) only once the transaction that holds this commit has committed."""
        plan = self._plan(stmt, params)
        if self.pg:
            if steps:
                raise ValueError("PostgreSQL commits with step rows take SqlStore's transaction")
            conn = None
            try:
                conn = self._checkout()
                done = self._commit_pg(conn, stmt, plan, params, event_rows, ledger, summary)
                self._checkin(conn)
                return done
            except Exception as exc:  # noqa: BLE001 - the driver's own errors (locked, disconnected, full disk)
                if conn is not None:
                    _close(conn)  # it may be broken: the next commit makes a new one
                raise self._failed(exc) from None
        return self._grouped(_Request(plan, params, event_rows, ledger, wake, summary=summary, steps=steps))

    def write(self, fn):
        """``fn(cursor, tx)`` (a ``sqlite3`` cursor; ``tx`` the transaction's dict of
        :func:`flowctl.store.ledger.append`) inside the next group commit (SQLite only), run
        again in a savepoint of its own if another commit of the group failed (so it writes SQL
        only); returns what ``fn`` returns (not False).
        Raises :class:`~flowctl.errors.StoreError` when the database fails (nothing of ``fn``
        kept), or what ``fn`` raised."""
        return self._grouped(_Request(None, None, None, write=fn))

    def _failed(self, exc, write: bool = False) -> StoreError:
        if write:  # (HotPath.write: not a step)
            return StoreError(f"cannot write to {self.store.safe_url}: {type(exc).__name__}: {first_line(exc)}",
                              hint="nothing of this write was kept; resume the run when the store is back")
        return StoreError(f"cannot commit the step to {self.store.safe_url}: {type(exc).__name__}: {first_line(exc)}",
                          hint="nothing of this step was written; resume the run when the store is back")

    # ------------------------------------------------------------------ group commit (SQLite)
    def _grouped(self, req) -> bool:
        """Group commit: the commits that arrive while one transaction is being written wait, and the
        first of them then writes all of them in the next transaction (one ``BEGIN IMMEDIATE`` …
        ``COMMIT``, one savepoint each). Each caller returns once that transaction has committed;
        a commit whose UPDATE matches no row, or whose statements fail, is undone alone (its
        savepoint) and the others are written. The driver runs the SQL without the GIL, so the
        threads of a worker go on with their steps meanwhile."""
        group = self._group
        with group:
            self._queue.append(req)
            while self._leading and not req.done:
                group.wait()
            if not req.done:
                self._leading = True
                batch, self._queue = self._queue, []
        if not req.done:
            try:
                self._commit_sqlite(batch)
            finally:
                with group:
                    self._leading = False
                    for r in batch:
                        if not r.done:
                            r.error = r.error or RuntimeError("the group commit was interrupted")
                            r.done = True
                    group.notify_all()
        if req.error is not None:
            raise req.error if isinstance(req.error, StoreError) else self._failed(req.error, req.write is not None)
        return req.result

    def _commit_sqlite(self, batch: list) -> None:
        """Write ``batch`` (requests) in one transaction on a connection of our own; each gets its result or error."""
        conn = None
        try:
            conn = self._checkout()
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                if len(batch) == 1:
                    self._write_all(cur, batch, alone=True)
                elif not self._write_all(cur, batch):  # one failed: undone, the group is written again one by one
                    cur.execute("ROLLBACK")
                    cur.execute("BEGIN IMMEDIATE")
                    tx: dict = {}
                    for r in batch:
                        cur.execute("SAVEPOINT flowctl_step")
                        try:
                            r.result = self._write_one(cur, r, tx)
                        except Exception as exc:  # noqa: BLE001 - this commit's own failure (a trigger, a constraint)
                            cur.execute("ROLLBACK TO flowctl_step")
                            tx.clear()  # the ledger head it moved is undone with it
                            r.error = exc
                        cur.execute("RELEASE flowctl_step")
                if len(batch) == 1 and not batch[0].result:
                    cur.execute("ROLLBACK")
                else:
                    cur.execute("COMMIT")
                    self._checkpoints.committed(len(batch), cur)
            except BaseException:
                rollback(cur)
                raise
            self._checkin(conn)
        except Exception as exc:  # noqa: BLE001 - BEGIN or COMMIT failed (locked, full disk): nothing was written
            if conn is not None:
                _close(conn)
            for r in batch:
                r.result, r.error = None, r.error or exc
        for r in batch:
            r.done = True

    def _write_all(self, cur, batch: list, alone: bool = False) -> bool:
        """Every commit of ``batch`` in the open transaction, without a savepoint each: each one's
        UPDATE (and a new run's INSERT) as it comes, the rows that only add to the store — event
        rows, ledger rows, summaries, the parents' wake-ups — kept, then written for the whole group
        in a statement each (:meth:`_flush`). True; False when one raised (its error is not kept:
        the caller rolls the transaction back and writes the group again, each commit in a
        savepoint, one statement at a time); ``alone`` (a group of one): what it raised is raised."""
        tx: dict = {"defer": True, "events": [], "summaries": [], "wake": []}
        try:
            for r in batch:
                r.result = self._write_one(cur, r, tx)
            self._flush(cur, tx)
        except Exception:  # noqa: BLE001 - one commit's own failure: written again, alone in its savepoint
            if alone:
                raise
            for r in batch:
                r.result = None
            return False
        return True

    def _flush(self, cur, tx: dict) -> None:
        """Write what the commits of a group kept in ``tx`` (:meth:`_write_all`)."""
        events = tx["events"]
        for lo in range(0, len(events), FLUSH_ROWS):
            part = events[lo:lo + FLUSH_ROWS]
            cur.execute(self._sqlite_insert() + self._more_rows(len(part) - 1), [v for row in part for v in row])
        flush(cur.execute, tx)  # the ledger's rows and its head
        summaries = tx["summaries"]
        for lo in range(0, len(summaries), FLUSH_ROWS):
            part = summaries[lo:lo + FLUSH_ROWS]
            cur.execute(upsert_sql(False).replace("VALUES (?, ?, ?, ?)", "VALUES (?, ?, ?, ?)" + ", (?, ?, ?, ?)"
                                                  * (len(part) - 1)), [v for row in part for v in row])
        wake = tx["wake"]
        for lo in range(0, len(wake), FLUSH_ROWS):
            part = wake[lo:lo + FLUSH_ROWS]
            cur.execute(WAKE_PARENTS.replace("(?)", "(" + ", ".join("?" * len(part)) + ")"), part)

    def _more_rows(self, n: int) -> str:
        """``, (?, …), …``: ``n`` more rows of event values (cached)."""
        key = ("more", n)
        found = self._sql.get(key)
        if found is None:
            found = self._sql[key] = (", (" + ", ".join("?" * len(_EVENT_COLUMNS)) + ")") * n
        return found

    def _write_one(self, cur, req, tx: dict):
        """One commit's UPDATE and INSERT inside the open transaction (``tx``: the transaction's
        dict of :func:`flowctl.store.ledger.append`). False: the UPDATE matched no row; else the
        pause request it returned (text), or True."""
        if req.write is not None:
            return req.write(cur, tx)
        sql, _compiled, _columns, names, constants = req.plan
        params = req.params
        cur.execute(sql, [params[name] if name in params else constants[name] for name in names])
        returned = cur.fetchall()
        if len(returned) != 1:
            return False
        if req.ledger is not None:
            self._ended(req.ledger, returned)
        pause = returned[0][0] or True
        rows = req.rows
        deferred = "events" in tx  # (the group's rows written together: _write_all)
        if deferred:
            tx["events"].extend(rows)
        elif len(rows) == 1:
            cur.execute(self._sqlite_insert(), rows[0])
        elif rows:
            cur.executemany(self._sqlite_insert(), rows)
        for step in req.steps:
            cur.execute(self._step_upsert(tuple(step)), tuple(step.values()))
        if req.ledger is not None:  # the run ends: its ledger row, its parent's wake-up, its summary
            from flowctl.store.ledger import append

            # the run's head as the UPDATE above wrote it (it matched: the row holds these values)
            head = (params["last_seq"], params["last_hash"] or "") if "last_seq" in params and "last_hash" in params \
                else None
            append(cur.execute, False, req.ledger, "end", head=head, tx=tx)
            if not deferred:
                if req.wake:
                    cur.execute(WAKE_PARENT, (req.ledger,))
                write_summary(cur.execute, False, req.ledger, *req.summary)
            else:
                if req.wake:
                    tx["wake"].append(req.ledger)
                first, facts, last = req.summary  # (the events before first_seq: stored by earlier commits)
                before = cur.execute(before_sql(False), (req.ledger, int(first))).fetchall() if reads_before(first) else ()
                tx["summaries"].append(summary_row(req.ledger, facts, last, before))
        return pause

    def _commit_pg(self, conn, stmt, plan, params, event_rows, ledger=None, summary=None) -> bool:
        values = dict(plan[4])
        values.update(params)
        for i, row in enumerate(event_rows):
            values.update(zip(self._names(i), row))
        if ledger is None:
            sql, _ = self._pg_statement(stmt, plan[2], len(event_rows))
            cur = conn.cursor()
            cur.execute(sql, values)
            returned = cur.fetchall()
        else:
            returned = self._end_pg(conn, stmt, plan, values, ledger, summary, params, len(event_rows))
            self._ended(ledger, returned)
        return len(returned) == 1 and (returned[0][0] or True)

    def _end_pg(self, conn, stmt, plan, values, run_id, summary, params, n_events) -> list:
        """A run's end on PostgreSQL: its commit, its ledger ``end`` row
        (:data:`~flowctl.store.ledger.END_CTES_PG`) and its summary
        (:data:`~flowctl.store.summary.UPSERT_CTE_PG`) in **one statement** (one round trip, one
        atomic write in autocommit), the ledger row and the summary written only if the commit's
        UPDATE matched; no client code runs while the ledger's head row — which every run's end
        takes in turn — is locked. The events of the run this store did not write (a claimed run's
        ``run_started``) are read first (stored events never change). Returns the statement's rows."""
        from flowctl.store import ledger as lg

        seq, head = params.get("last_seq"), params.get("last_hash")
        if lg.hook is not None or summary is None or seq is None or head is None:
            sql, _ = self._pg_statement(stmt, plan[2], n_events)
            return self._end_pg_stepwise(conn, sql, values, run_id, summary)
        before = ()
        if reads_before(summary[0]):
            before = conn.execute(before_sql(True), (run_id, int(summary[0]))).fetchall()
        values.update(zip(_SUMMARY_KEYS, summary_row(run_id, summary[1], summary[2], before)))
        values.update((f"l_{k}", v) for k, v in lg.end_params(run_id, seq, head).items())
        sql, _ = self._pg_statement(stmt, plan[2], n_events, end=True)
        return conn.execute(sql, values).fetchall()

    @staticmethod
    def _end_pg_stepwise(conn, sql, values, run_id, summary) -> list:
        """A run's end on PostgreSQL: its commit, ledger row and summary in one transaction, in two
        round trips (psycopg's pipeline mode): ``BEGIN``, the commit's statement and the reads the
        ledger row and the summary need (the run's head as this transaction left it, the ledger
        head ``FOR UPDATE``, the run's events before this store's first commit of it); then the
        writes and ``COMMIT`` (``ROLLBACK`` when the commit's UPDATE matched no row). Returns the
        commit statement's rows."""
        from flowctl.store import ledger as lg

        with conn.pipeline() as pipe:
            conn.execute("BEGIN")
            step = conn.execute(sql, values)
            found = conn.execute(lg.run_sql(True), (run_id,))
            top = conn.execute(lg.head_sql(True))
            first = summary[0] if summary is not None else 0
            before = conn.execute(before_sql(True), (run_id, int(first))) if reads_before(first) else None
            pipe.sync()
            returned = step.fetchall()
            if len(returned) != 1:
                conn.execute("ROLLBACK")
                return returned
            lg.append_read(conn.execute, True, run_id, "end", found.fetchone(), top.fetchone())
            if summary is not None:
                conn.execute(upsert_sql(True), summary_row(run_id, summary[1], summary[2],
                                                           before.fetchall() if before is not None else ()))
            conn.execute("COMMIT")
        return returned

    def _names(self, i: int) -> tuple:
        key = ("names", i)
        found = self._sql.get(key)
        if found is None:
            found = self._sql[key] = tuple(f"e{i}_{c}" for c in _EVENT_COLUMNS)
        return found



def rollback(cur) -> None:
    """``ROLLBACK`` on the DBAPI cursor ``cur``, when there is a transaction left to roll back."""
    try:
        cur.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 - no transaction left to roll back
        pass


def _close(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass
