"""The worker queue of the SQL store: claims, leases, cancel requests, the worker registry, limits.

:class:`QueueMethods` is a part of :class:`flowctl.store.core.SqlStore` (a mix-in: it uses the
store's ``engine``, ``sa``, ``t``, ``pg``, ``now_expr`` and ``_begin``); together they implement
:class:`flowctl.store.protocol.QueueStore`. Leases and claims use the database clock only:
``EXTRACT(EPOCH FROM now())`` on PostgreSQL, ``julianday('now')`` on SQLite; times are epoch
seconds, leases and delays seconds.
"""
from __future__ import annotations

import contextlib
import functools

from flowctl.errors import StoreError, first_line
from flowctl.store.hot import WAKE_PARENT as _SQLITE_WAKE_PARENT  # the ended run's parent due now (SQLite)
from flowctl.store.hot import rollback
from flowctl.store.records import FINAL, dumps, loads, run_dict

#: ``release(available_at=...)`` not given: the run's due time stays as it is.
_KEEP = object()


class QueueMethods:
    # --------------------------------------------------------------------- workers: claims and leases
    NOTIFY_CHANNEL = "flowctl_runs"

    def now(self) -> float:
        """The database clock, epoch seconds."""
        with self._read() as conn:
            return float(conn.execute(self.sa.select(self.now_expr)).scalar_one())

    def _notify(self, conn, payload: str) -> None:
        if self.pg:
            conn.execute(self.sa.text("SELECT pg_notify(:c, :p)"), {"c": self.NOTIFY_CHANNEL, "p": payload})

    def request_cancel(self, run_id: str, request: dict) -> bool:
        """Ask the worker holding ``run_id`` to cancel it: ``request`` is ``{by, compensate}``, kept
        with the time (database clock) in ``cancel_requested``. True if a live worker lease holds the
        run (that worker cancels it at its next checkpoint); False if none does (cancel it here)."""
        sa, r = self.sa, self.t.runs
        with self._begin() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.status == "running", r.c.lease_until >= now)
                               .values(cancel_requested=dumps(dict(request, at=now))))
            return res.rowcount == 1

    def cancel_requests(self, run_ids) -> dict:
        """``{run_id: request}`` for those of ``run_ids`` someone asked to cancel (a worker's heartbeat)."""
        if not run_ids:
            return {}
        ids = list(run_ids)
        if self.pg:
            sql, params = "SELECT id, cancel_requested FROM flowctl_runs WHERE id = ANY(%s)", (ids,)
        else:
            sql, params = f"SELECT id, cancel_requested FROM flowctl_runs WHERE id IN ({', '.join('?' * len(ids))})", ids
        with self._read_cursor() as cur:
            cur.execute(sql + " AND cancel_requested IS NOT NULL", params)
            return {rid: loads(text) for rid, text in cur.fetchall()}

    def cancel_request_at_end(self, run_id):
        """The cancel request of ``run_id`` (a dict, or None) as the commit that ended it found it
        on the row — that commit's own ``RETURNING`` (:meth:`flowctl.store.hot.HotPath.cancel_at_end`),
        no read — or read from the row when that commit did not go through the per-step path."""
        hot = self.hot
        if hot is not None:
            known, text = hot.cancel_at_end(run_id)
            if known:
                return loads(text) if text is not None else None
        return self.cancel_requests([run_id]).get(run_id)

    @contextlib.contextmanager
    def _read_cursor(self):
        """A DBAPI cursor for one read on one of the per-step commit's own connections (autocommit:
        one round trip, no BEGIN/ROLLBACK around it); SQLAlchemy's pool where there is none.
        Raises :class:`StoreError` when the database fails."""
        hot = self.hot
        if hot is None:
            with self._cursor() as cur:
                yield cur
            return
        conn = hot._checkout()
        try:
            cur = conn.cursor()
            try:
                yield cur
            finally:
                cur.close()
        except Exception as exc:  # noqa: BLE001 - the driver's own errors: the connection may be broken
            _close(conn)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"cannot read {self.safe_url}: {type(exc).__name__}: {first_line(exc)}") from None
        hot._checkin(conn)

    def nudge(self, run_id: str) -> None:
        """Make the waiting (or running) parent ``run_id`` due now (a child of it ended)."""
        with self._begin() as conn:
            self._nudge(conn, run_id)

    def _nudge(self, conn, run_id: str) -> None:
        sa, r = self.sa, self.t.runs
        res = conn.execute(r.update().where(r.c.id == run_id, r.c.status.in_(("waiting", "running")))
                           .values(available_at=self.now_expr))
        if res.rowcount and self.pg:  # wakes the idle workers of the parent's queue
            queue = conn.execute(sa.select(r.c.queue).where(r.c.id == run_id)).scalar_one_or_none()
            self._notify(conn, queue or "default")

    def _wake_parent(self, conn, run_id: str) -> None:
        """``run_id`` ended in this transaction: make its parent due now, in the same transaction, so
        a child's end and its parent's wake-up are one step (no crash can fall between them). A parent
        that is running keeps the due time through its next park (``Runner.park(keep_due=True)``
        leaves the column alone): whether the parent's re-check of its children saw this end or not,
        it is claimed again. (On PostgreSQL the parent's row lock orders this against its park.)"""
        if not self.pg:  # one statement (no notify on SQLite): a child's end pays one more, not two
            conn.exec_driver_sql(_SQLITE_WAKE_PARENT, (run_id,))
            return
        sa, r = self.sa, self.t.runs
        parent = conn.execute(sa.select(r.c.parent_id).where(r.c.id == run_id)).scalar_one_or_none()
        if parent:
            self._nudge(conn, parent)

    def claim(self, owner: str, n: int, lease: float, queues=None) -> list:
        """Take up to ``n`` runs for ``owner``: due runs (``queued``, ``waiting``, ``paused`` with
        ``available_at <= now``) and ``running`` runs whose lease expired, highest ``priority``
        first, within the store's concurrency limits. Each is marked running for ``owner`` with
        ``lease_until = now + lease`` and its fencing token incremented.

        The claim also clears ``available_at`` (a running run is not due by time): a parent's wake-up
        (:meth:`_wake_parent`) that comes after the claim is then never undone by the claimer's
        first commit, which may come only with its first step (``run_resumed`` is committed with it).

        Returns ``[{id, fence, lease_until, prev_status, prev_owner, due_at, row}]``, ``row`` the
        claimed run as :meth:`get_run` returns it after the claim (so the worker need not read it
        again), ``due_at`` the ``available_at`` it had before (epoch seconds or None). PostgreSQL: one statement,
        ``FOR UPDATE SKIP LOCKED`` (claimers never wait on each other), after locking the limit rows
        if any exist; SQLite: a conditional update inside ``BEGIN IMMEDIATE`` (one writer at a time).
        """
        if n <= 0:
            return []
        queues = list(queues) if queues else None
        if self.pg and self.hot is not None:
            return self._claim_pg_pipelined(owner, n, float(lease), queues)
        if self.hot is not None:
            found = self._claim_sqlite_direct(owner, n, float(lease), queues)
            if found is not None:
                return found
        with self._begin() as conn:
            if self.pg:
                return self._claim_pg(conn, owner, n, float(lease), queues)
            return self._claim_sqlite(conn, owner, n, float(lease), queues)

    def _claim_pg_pipelined(self, owner, n, lease, queues) -> list:
        """:meth:`_claim_pg` on a connection of the per-step commit. First the claim statement alone,
        in autocommit, gated on the store having no limit rows (one execution, one round trip: the
        usual case); when it takes nothing — no limits and nothing due, or limits exist — (and
        straight away while the last such transaction found limit rows) the
        claim's transaction in psycopg's pipeline mode: ``BEGIN`` and the lock of the limit rows in
        one round trip, the claim and ``COMMIT`` in another. The gate is the transaction's own
        condition: a limit row added while the statement runs is not seen by either."""
        params = {"owner": owner, "lease": lease, "n": n, "scan": n}
        if queues:
            params["queues"] = queues
        where = "AND r.queue = ANY(:queues)" if queues else ""
        conn = self.hot._checkout()
        try:
            rows = ()
            if not getattr(self, "_limited", False):  # the last claim found no limit rows
                cur = conn.execute(_pyformat(_PG_CLAIM.format(queues=where + _NO_LIMITS, picked=_PG_PICK)), params)
                rows = cur.fetchall()
            if not rows:
                with conn.pipeline() as pipe:
                    conn.execute("BEGIN")
                    limited = conn.execute(_PG_LIMITS).fetchall()  # (fetching syncs the pipeline)
                    self._limited = bool(limited)  # a store with limits goes straight here next time
                    sql = _PG_CLAIM.format(queues=where, picked=_PG_PICK_LIMITED if limited else _PG_PICK)
                    params["scan"] = n * 4 if limited else n
                    cur = conn.execute(_pyformat(sql), params)
                    conn.execute("COMMIT")
                    pipe.sync()
                    rows = cur.fetchall()
            if rows:  # the result's own field names: cursor.description builds an object per column
                res = cur.pgresult
                names = [res.fname(i).decode() for i in range(res.nfields)]
                rows = [dict(zip(names, r)) for r in rows]
        except Exception as exc:  # noqa: BLE001 - the driver's own errors: nothing was claimed
            _close(conn)  # (a transaction left open dies with its connection)
            raise StoreError(f"cannot claim runs in {self.safe_url}: {type(exc).__name__}: {first_line(exc)}") from None
        self.hot._checkin(conn)
        out = []
        for found in rows:
            prev_status, prev_owner = found.pop("prev_status"), found.pop("prev_owner")
            due_at = found.pop("prev_available_at")
            out.append(self._claimed(found, prev_status, prev_owner, due_at))
        return out

    def _claim_sqlite_direct(self, owner, n, lease, queues) -> list | None:
        """:meth:`_claim_sqlite` without SQLAlchemy, on a connection of the per-step commit: the
        same reads and conditional updates in one ``BEGIN IMMEDIATE`` … ``COMMIT`` (SQLite's one
        write lock is held for less time: the step commits wait on it), each claimed row handed
        back by its UPDATE's ``RETURNING``. None when the store has limits (then
        :meth:`_claim_sqlite` counts them)."""
        conn = self.hot._checkout()
        cur = conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                if cur.execute("SELECT 1 FROM flowctl_limits LIMIT 1").fetchone() is not None:
                    cur.execute("ROLLBACK")
                    out = None
                else:
                    out = self._claim_sqlite_rows(cur, owner, n, lease, queues)
                    cur.execute("COMMIT")
            except BaseException:
                rollback(cur)
                raise
        except Exception as exc:  # noqa: BLE001 - the driver's own errors: nothing was claimed
            _close(conn)
            if isinstance(exc, StoreError):  # a corrupt row (run_dict)
                raise
            raise StoreError(f"cannot claim runs in {self.safe_url}: {type(exc).__name__}: {first_line(exc)}") from None
        self.hot._checkin(conn)
        return out

    def _claim_sqlite_rows(self, cur, owner, n, lease, queues) -> list:
        now = float(cur.execute(_SQLITE_NOW).fetchone()[0])
        where = ("((status IN ('queued', 'waiting', 'paused') AND available_at <= ?) "
                 "OR (status = 'running' AND lease_until < ?))")
        params = [now, now]
        if queues:
            where += f" AND queue IN ({', '.join('?' * len(queues))})"
            params += queues
        found = cur.execute(f"SELECT id, status, owner, fence, available_at FROM flowctl_runs WHERE {where} "
                            "ORDER BY priority DESC, coalesce(available_at, lease_until), id LIMIT ?",
                            [*params, n]).fetchall()
        out = []
        for run_id, status, prev_owner, fence, due_at in found:
            cur.execute(_SQLITE_CLAIM, (owner, now + lease, fence + 1, now, run_id, fence, status))
            got = cur.fetchall()
            if got:
                names = [d[0] for d in cur.description]
                out.append(self._claimed(dict(zip(names, got[0])), status, prev_owner, due_at))
        return out

    def _claim_pg(self, conn, owner, n, lease, queues) -> list:
        sa = self.sa
        limited = conn.execute(sa.text(_PG_LIMITS)).all()
        sql = _PG_CLAIM.format(queues="AND r.queue = ANY(:queues)" if queues else "",
                               picked=_PG_PICK_LIMITED if limited else _PG_PICK)
        params = {"owner": owner, "lease": lease, "n": n, "scan": n * 4 if limited else n}
        if queues:
            params["queues"] = queues
        out = []
        for found in conn.execute(sa.text(sql), params).mappings().all():
            found = dict(found)
            prev_status, prev_owner = found.pop("prev_status"), found.pop("prev_owner")
            due_at = found.pop("prev_available_at")
            out.append(self._claimed(found, prev_status, prev_owner, due_at))
        return out

    def _claimed(self, row: dict, prev_status: str, prev_owner, due_at) -> dict:
        """One claim's entry (see :meth:`claim`) from the run row as the claim left it."""
        run = run_dict(row, self)
        self._note_parent(run)
        return {"id": run["id"], "fence": run["fence"], "lease_until": run["lease_until"], "prev_status": prev_status,
                "prev_owner": prev_owner, "due_at": due_at, "row": run}

    def _claim_sqlite(self, conn, owner, n, lease, queues) -> list:
        sa, t = self.sa, self.t
        r = t.runs
        now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
        due = sa.and_(r.c.status.in_(("queued", "waiting", "paused")), r.c.available_at <= now)
        expired = sa.and_(r.c.status == "running", r.c.lease_until < now)
        q = (sa.select(r.c.id, r.c.status, r.c.owner, r.c.fence, r.c.flow, r.c.queue, r.c.available_at)
             .where(sa.or_(due, expired))
             .order_by(r.c.priority.desc(), sa.func.coalesce(r.c.available_at, r.c.lease_until), r.c.id))
        if queues:
            q = q.where(r.c.queue.in_(queues))
        limits = {(s_, nm): mx for s_, nm, mx in conn.execute(sa.select(t.limits.c.scope, t.limits.c.name,
                                                                          t.limits.c.max_running))}
        rows = conn.execute(q.limit(n * 4 if limits else n)).all()
        busy = self._busy(conn, now) if limits else {}
        out = []
        for run_id, status, prev_owner, fence, flow, queue, due_at in rows:
            if len(out) >= n:
                break
            keys = [("flow", flow), ("queue", queue)]
            if any(k in limits and busy.get(k, 0) >= limits[k] for k in keys):
                continue
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.fence == fence, r.c.status == status)
                               .values(status="running", owner=owner, lease_until=now + lease, fence=fence + 1,
                                       updated_at=now, available_at=None))
            if res.rowcount == 1:
                for k in keys:
                    busy[k] = busy.get(k, 0) + 1
                out.append((run_id, status, prev_owner, due_at))
        if not out:
            return []
        found = {row["id"]: dict(row) for row in conn.execute(sa.select(r).where(r.c.id.in_([o[0] for o in out])))
                 .mappings()}
        return [self._claimed(found[run_id], status, prev_owner, due_at) for run_id, status, prev_owner, due_at in out]

    def _busy(self, conn, now) -> dict:
        """Runs held under a live lease, per ``("flow", name)`` and ``("queue", name)``."""
        sa, r = self.sa, self.t.runs
        live = sa.and_(r.c.status == "running", r.c.lease_until >= now)
        busy = {}
        for scope, col in (("flow", r.c.flow), ("queue", r.c.queue)):
            for name, count in conn.execute(sa.select(col, sa.func.count()).where(live).group_by(col)):
                busy[(scope, name)] = count
        return busy

    def acquire(self, run_id: str, expect_seq: int, owner: str, lease: float) -> tuple:
        """Lease one run by id for ``owner`` (a worker continuing a child or parent run in process):
        only if no live lease is held on it and it is at ``expect_seq``. Returns ``(fence,
        parent_id)`` with the new fencing token; raises :class:`RunConflict` otherwise."""
        sa, r = self.sa, self.t.runs
        stmt = (r.update().where(r.c.id == run_id, r.c.last_seq == expect_seq, r.c.status.notin_(tuple(FINAL)),
                                 sa.or_(r.c.lease_until.is_(None), r.c.lease_until < self.now_expr))
                .values(owner=owner, lease_until=self.now_expr + float(lease), fence=r.c.fence + 1)
                .returning(r.c.fence, r.c.parent_id))
        with self._begin() as conn:
            found = conn.execute(stmt).first()
            if found is None:
                raise self._conflict(conn, run_id, None)
        return int(found[0]), found[1]

    def renew(self, owner: str, held: dict, lease: float) -> set:
        """Heartbeat: extend the lease of each ``{run_id: fence}`` still held by ``owner`` (its token
        current, its lease not yet expired). Returns the ids renewed; the others are lost."""
        if not held:
            return set()
        sa, r = self.sa, self.t.runs
        pairs = [(k, v) for k, v in held.items()]
        if self.pg and len(pairs) > 1:
            # One row a transaction: a transaction renewing several rows holds each row's lock until
            # it commits, and a child's end, which holds the child's row and wants its parent's,
            # deadlocked with it (breaker finding: heartbeat, two children's ends and the ledger
            # head in one cycle, the parent's driver failing with DeadlockDetected).
            renewed = set()
            for pair in pairs:
                renewed |= self.renew(owner, dict([pair]), lease)
            return renewed
        stmt = (r.update().where(r.c.owner == owner, r.c.status == "running", r.c.lease_until >= self.now_expr,
                                 sa.tuple_(r.c.id, r.c.fence).in_(pairs))
                .values(lease_until=self.now_expr + float(lease)).returning(r.c.id))
        with self._begin() as conn:
            return {row[0] for row in conn.execute(stmt)}

    def release(self, run_id: str, fence: int, *, status: str | None = None, delay: float = 0.0,
                available_at=_KEEP) -> bool:
        """Give a held run back. ``status=None``: it stays running with its lease ending now (plus
        ``delay``), so any worker's claim takes it over from its checkpoint; else it returns to
        ``status`` (a run claimed but not started), due again after ``delay`` seconds, or at
        ``available_at`` (epoch seconds, or None: not due by time)."""
        r = self.t.runs
        if status is None:
            values = {"lease_until": self.now_expr + float(delay)}
        else:
            values = {"status": status, "lease_until": None}
            if available_at is not _KEEP:
                values["available_at"] = available_at
            elif delay:
                values["available_at"] = self.now_expr + float(delay)
        stmt = r.update().where(r.c.id == run_id, r.c.fence == fence, r.c.status == "running").values(**values) \
            .returning(r.c.queue)
        with self._begin() as conn:
            found = conn.execute(stmt).first()
            if found is not None and not delay:
                self._notify(conn, found[0] or "default")
        return found is not None

    def next_due(self, queues=None):
        """Seconds until the next run becomes claimable (a due time or a lease end); None if none."""
        sa, r = self.sa, self.t.runs
        due = sa.select(sa.func.min(r.c.available_at)).where(r.c.status.in_(("queued", "waiting", "paused")))
        lease = sa.select(sa.func.min(r.c.lease_until)).where(r.c.status == "running")
        if queues:
            due, lease = due.where(r.c.queue.in_(list(queues))), lease.where(r.c.queue.in_(list(queues)))
        with self.engine.connect() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            times = [conn.execute(due).scalar(), conn.execute(lease).scalar()]
        times = [x for x in times if x is not None]
        return max(0.0, min(times) - now) if times else None

    # --------------------------------------------------------------------- workers: registry and limits
    def register_worker(self, worker_id: str, *, host: str, pid: int, queues, concurrency: int, lease: float) -> None:
        w = self.t.workers
        values = {"host": host, "pid": pid, "queues": dumps(list(queues)) if queues else None,
                  "concurrency": concurrency, "lease_s": float(lease), "status": "running",
                  "started_at": self.now_expr, "heartbeat_at": self.now_expr, "runs_done": 0}
        with self._begin() as conn:
            # forget workers silent for a day (their rows only explain history)
            conn.execute(w.delete().where(w.c.heartbeat_at < self.now_expr - 86400.0))
            if conn.execute(w.update().where(w.c.id == worker_id).values(**values)).rowcount == 0:
                conn.execute(w.insert().values(id=worker_id, **values))

    def worker_heartbeat(self, worker_id: str, *, status: str | None = None, runs_done: int | None = None) -> None:
        w = self.t.workers
        values = {"heartbeat_at": self.now_expr}
        if status:
            values["status"] = status
        if runs_done is not None:
            values["runs_done"] = runs_done
        with self._begin() as conn:
            conn.execute(w.update().where(w.c.id == worker_id).values(**values))

    def list_workers(self, *, live_only: bool = True) -> list:
        """Workers with ``{id, host, pid, queues, concurrency, lease_s, status, started_at,
        heartbeat_at, runs_done, age_s, live, runs: [{id, flow, lease_until}]}``; a worker is live
        while its last heartbeat is younger than its lease."""
        sa, w, r = self.sa, self.t.workers, self.t.runs
        with self._read() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            rows = [dict(x) for x in conn.execute(sa.select(w).order_by(w.c.started_at)).mappings()]
            held = conn.execute(sa.select(r.c.owner, r.c.id, r.c.flow, r.c.lease_until)
                                .where(r.c.status == "running", r.c.lease_until >= now)
                                .order_by(r.c.owner, r.c.id)).all()
        out = []
        for row in rows:
            row["queues"] = loads(row["queues"])
            row["age_s"] = now - row["heartbeat_at"]
            row["live"] = row["status"] != "stopped" and row["age_s"] <= row["lease_s"]
            row["runs"] = [{"id": i, "flow": f, "lease_until": lu} for o, i, f, lu in held if o == row["id"]]
            if row["live"] or not live_only:
                out.append(row)
        return out

    def set_limit(self, scope: str, name: str, max_running: int | None) -> None:
        """Store-wide concurrency limit: at most ``max_running`` runs of flow (``scope="flow"``) or
        queue ``name`` held by workers at once; ``None`` removes it."""
        if scope not in ("flow", "queue"):
            raise StoreError(f"limit scope must be flow or queue, not {scope!r}")
        lim = self.t.limits
        key = (lim.c.scope == scope, lim.c.name == name)
        if self.limits().get((scope, name)) == max_running:
            return  # unchanged: no lock taken (workers starting with the same --limit)
        with self._begin() as conn:
            if max_running is None:
                conn.execute(lim.delete().where(*key))
                return
            # an upsert, never delete + insert: a claim waiting on the row must find it again
            if self.pg:
                from sqlalchemy.dialects.postgresql import insert
            else:
                from sqlalchemy.dialects.sqlite import insert
            stmt = insert(lim).values(scope=scope, name=name, max_running=int(max_running))
            conn.execute(stmt.on_conflict_do_update(index_elements=[lim.c.scope, lim.c.name],
                                                    set_={"max_running": int(max_running)}))

    def limits(self) -> dict:
        sa, lim = self.sa, self.t.limits
        with self._read() as conn:
            return {(s_, n): m for s_, n, m in conn.execute(sa.select(lim.c.scope, lim.c.name, lim.c.max_running))}

    def listen_dsn(self) -> str | None:
        """A libpq address for ``LISTEN`` (PostgreSQL only)."""
        if not self.pg:
            return None
        return "postgresql://" + self.url.split("://", 1)[1]


_SQLITE_NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"
#: one run claimed on SQLite (:meth:`QueueMethods._claim_sqlite_direct`), as it was when picked
_SQLITE_CLAIM = ("UPDATE flowctl_runs SET status = 'running', owner = ?, lease_until = ?, fence = ?, updated_at = ?, "
                 "available_at = NULL WHERE id = ? AND fence = ? AND status = ? RETURNING *")

#: a claim on PostgreSQL with limits locks their rows first: limited claimers take turns
_PG_LIMITS = "SELECT scope, name FROM flowctl_limits ORDER BY scope, name FOR UPDATE"


@functools.lru_cache(maxsize=16)
def _pyformat(sql: str) -> str:
    """SQLAlchemy's ``:name`` parameters of the claim's text as psycopg's ``%(name)s`` (a few texts,
    converted once each: every claim used to run the regular expression again)."""
    import re

    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql)


# The claim on PostgreSQL: one statement. Two branches, each locking its rows with SKIP LOCKED (a
# row another claimer holds is passed over, never waited for): due runs and runs whose lease
# expired. The picked rows become running for the claimer with a fresh lease and fence + 1.
_PG_CLAIM = """
WITH clock AS (SELECT CAST(EXTRACT(EPOCH FROM now()) AS DOUBLE PRECISION) AS now),
due AS (
    SELECT r.id, r.status AS prev_status, r.owner AS prev_owner, r.flow, r.queue, r.priority,
           r.available_at AS sort_at, r.available_at AS prev_available_at
    FROM flowctl_runs r
    WHERE r.status IN ('queued', 'waiting', 'paused') AND r.available_at <= (SELECT now FROM clock) {queues}
    ORDER BY r.priority DESC, r.available_at, r.id
    LIMIT :scan
    FOR UPDATE OF r SKIP LOCKED
),
expired AS (
    SELECT r.id, r.status AS prev_status, r.owner AS prev_owner, r.flow, r.queue, r.priority,
           r.lease_until AS sort_at, r.available_at AS prev_available_at
    FROM flowctl_runs r
    WHERE r.status = 'running' AND r.lease_until < (SELECT now FROM clock) {queues}
    ORDER BY r.priority DESC, r.lease_until, r.id
    LIMIT :scan
    FOR UPDATE OF r SKIP LOCKED
),
cand AS (SELECT * FROM due UNION ALL SELECT * FROM expired),
{picked}
UPDATE flowctl_runs AS r
SET status = 'running', owner = :owner, lease_until = clock.now + :lease, fence = r.fence + 1,
    updated_at = clock.now, available_at = NULL
FROM picked, clock
WHERE r.id = picked.id
RETURNING r.*, picked.prev_status, picked.prev_owner, picked.prev_available_at
"""

#: the gate of the claim statement sent alone, outside a transaction that locked the limit rows
_NO_LIMITS = " AND NOT EXISTS (SELECT 1 FROM flowctl_limits)"

_PG_PICK = "picked AS (SELECT * FROM cand ORDER BY priority DESC, sort_at, id LIMIT :n)"

# With limits (their rows are locked FOR UPDATE by the claim's transaction first, so limited
# claimers take turns and each sees the others' committed claims): a candidate is picked only if
# the runs of its flow / queue already held under a live lease plus its rank among the candidates
# of that flow / queue stay within the limit.
_PG_PICK_LIMITED = """ranked AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.flow ORDER BY c.priority DESC, c.sort_at, c.id) AS flow_rank,
           row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.sort_at, c.id) AS queue_rank
    FROM cand c
),
busy_flow AS (
    SELECT b.flow, count(*) AS n FROM flowctl_runs b
    WHERE b.status = 'running' AND b.lease_until >= (SELECT now FROM clock) GROUP BY b.flow
),
busy_queue AS (
    SELECT b.queue, count(*) AS n FROM flowctl_runs b
    WHERE b.status = 'running' AND b.lease_until >= (SELECT now FROM clock) GROUP BY b.queue
),
picked AS (
    SELECT k.* FROM ranked k
    LEFT JOIN flowctl_limits lf ON lf.scope = 'flow' AND lf.name = k.flow
    LEFT JOIN busy_flow bf ON bf.flow = k.flow
    LEFT JOIN flowctl_limits lq ON lq.scope = 'queue' AND lq.name = k.queue
    LEFT JOIN busy_queue bq ON bq.queue = k.queue
    WHERE (lf.max_running IS NULL OR COALESCE(bf.n, 0) + k.flow_rank <= lf.max_running)
      AND (lq.max_running IS NULL OR COALESCE(bq.n, 0) + k.queue_rank <= lq.max_running)
    ORDER BY k.priority DESC, k.sort_at, k.id
    LIMIT :n
)"""


def _close(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass
