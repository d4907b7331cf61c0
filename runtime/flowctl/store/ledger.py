"""The store-wide ledger of runs (schema 11): which runs exist, chained, so deleting a whole run is seen.

``flowctl audit verify RUN`` proves one run's log against its own row; deleting a run's row, events
and steps together left nothing behind to notice. The ledger (table ``flowctl_ledger``) holds one
row per run start (``start``, written in the transaction of :meth:`create_run`), per run end
(``end``: the commit that gives the run a final status), per prune of a run's events (``prune``,
:mod:`flowctl.store.prune`) and, once, per run that existed before schema 11 (``adopt``, by the
upgrade). A row is ``(n, run_id, kind, run_head_seq, run_head_hash, prev_hash, hash, at)``:

* ``n`` 1, 2, …; ``run_head_seq`` / ``run_head_hash`` the run's ``last_seq`` / ``last_hash`` as the
  transaction left them; ``at`` epoch seconds (float);
* ``hash = sha256(prev_hash + canonical({n, run_id, kind, run_head_seq, run_head_hash, at}))`` in
  hex, ``prev_hash`` the previous row's ``hash`` ("" for n = 1).

``flowctl_ledger_head`` (one row, ``id`` 1) holds the last ``(n, hash)``; every append reads it
first (on PostgreSQL ``FOR UPDATE``: concurrent run starts take turns, so the chain never forks;
SQLite's ``BEGIN IMMEDIATE`` already serialises writers). The per-step commit never touches it.

:func:`verify` walks the ledger in ``n`` order and the runs in id order, in batches of
:data:`BATCH`. It proves: the chain is unbroken (a row edited or removed in the middle breaks it);
every run the ledger names exists with the head recorded for it when it ended or was pruned (a run
still going has at least its recorded seq); every run in the store is in the ledger. It does **not**
prove the tail: removing the last rows (and setting the head row back) leaves a shorter valid chain.
Only an anchor kept outside the store (``flowctl audit head --ledger`` prints ``n:hash``) catches a
cut tail: :func:`verify` with ``expect_head`` requires the chain to hold it.
"""
from __future__ import annotations

import hashlib
import json
import time

#: ``kind`` of the rows: a run created, ended, pruned, or found by the upgrade to schema 11.
KINDS = ("start", "end", "prune", "adopt")
#: rows (and runs) read per query by :func:`verify`
BATCH = 2000

#: Called (no arguments) inside an append between reading the ledger head and writing the row:
#: tests start another process's run there. None in production.
hook = None

_HEAD = "SELECT n, hash FROM flowctl_ledger_head WHERE id = 1"
_RUN = "SELECT last_seq, last_hash FROM flowctl_runs WHERE id = ?"
_INSERT = ("INSERT INTO flowctl_ledger (n, run_id, kind, run_head_seq, run_head_hash, prev_hash, hash, at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
_MOVE = "UPDATE flowctl_ledger_head SET n = ?, hash = ? WHERE id = 1"


def row_hash(prev_hash: str, n: int, run_id: str, kind: str, seq: int, head: str, at: float) -> str:
    """The hash of one ledger row (hex sha256), chained to ``prev_hash``."""
    body = json.dumps({"n": n, "run_id": run_id, "kind": kind, "run_head_seq": seq, "run_head_hash": head,
                       "at": at}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


def _sql(text: str, pg: bool) -> str:
    return text.replace("?", "%s") if pg else text


def append(execute, pg: bool, run_id: str, kind: str, at: float | None = None, *, head: tuple | None = None,
           tx: dict | None = None) -> tuple:
    """Append a ``kind`` row for ``run_id`` inside the caller's open transaction. ``execute(sql,
    params)`` runs one DBAPI statement and returns a cursor (``sqlite3``, psycopg, or SQLAlchemy's
    ``exec_driver_sql``); the run's head is read from its row as this transaction left it, unless
    the caller gives it (``head``: ``(last_seq, last_hash)``, the values the transaction's own
    statement on the row wrote). ``tx`` (SQLite only): a dict the caller keeps for one
    transaction, in which the ledger head this append moved to is kept, so the next append in the
    same transaction does not read it again (``BEGIN IMMEDIATE`` holds the write lock: no other
    writer moves it meanwhile; the caller empties ``tx`` when it rolls back to a savepoint). With
    ``tx["defer"]`` true neither the row nor the head is written here: the caller writes the rows
    and the head once before the transaction commits (:func:`flush`), whatever the number of rows
    appended meanwhile.
    Returns ``(n, hash)`` of the new row. A store without the ledger's head row raises
    :class:`~flowctl.errors.StoreError` (the caller's transaction then rolls back)."""
    found = execute(_sql(_RUN, pg), (run_id,)).fetchone() if head is None else head
    top = tx.get("top") if tx is not None and hook is None else None
    if top is None:
        top = execute(head_sql(pg), ()).fetchone()
    defer = tx is not None and hook is None and tx.get("defer", False)
    moved = append_read(execute, pg, run_id, kind, found, top, at, move=not defer,
                        rows=tx.setdefault("ledger_rows", []) if defer else None)
    if tx is not None:
        tx["top"] = moved
        if defer:
            tx["unwritten"] = True
    return moved


#: ledger rows per INSERT statement of :func:`flush`
FLUSH_ROWS = 100


def flush(execute, tx: dict) -> None:
    """Write the rows the appends of ``tx`` (deferred: ``tx["defer"]``) made, in as few statements
    as :data:`FLUSH_ROWS` allows, and the ledger head they moved to (SQLite)."""
    rows = tx.pop("ledger_rows", None)
    for lo in range(0, len(rows or ()), FLUSH_ROWS):
        part = rows[lo:lo + FLUSH_ROWS]
        execute(_INSERT + ", (?, ?, ?, ?, ?, ?, ?, ?)" * (len(part) - 1), [v for row in part for v in row])
    if tx.pop("unwritten", False):
        execute(_MOVE, tuple(tx["top"]))


def run_sql(pg: bool) -> str:
    """The read of a run's head (``last_seq, last_hash``) an append records (one parameter: the id)."""
    return _sql(_RUN, pg)


def head_sql(pg: bool) -> str:
    """The read of the ledger's head row (``n, hash``; on PostgreSQL ``FOR UPDATE``)."""
    return _HEAD + (" FOR UPDATE" if pg else "")


def append_read(execute, pg: bool, run_id: str, kind: str, found, top, at: float | None = None, *,
                move: bool = True, rows: list | None = None) -> tuple:
    """:func:`append` after its two reads, made by the caller in the same transaction (pipelined on
    PostgreSQL: :mod:`flowctl.store.hot`): ``found`` the row of :func:`run_sql` (or None), ``top``
    that of :func:`head_sql`. Writes the row (or, given ``rows``, adds its parameters there) and
    moves the head (unless not ``move``); the caller writes what it kept (:func:`flush`). Returns
    ``(n, hash)``."""
    from flowctl.errors import StoreError

    seq, head = (found[0], found[1] or "") if found is not None else (0, "")
    if top is None:
        raise StoreError("the store has no ledger head row (flowctl_ledger_head): it was deleted",
                         hint="nothing was written; flowctl audit verify reports the ledger's state")
    if hook is not None:
        hook()
    n, at = top[0] + 1, time.time() if at is None else at
    value = row_hash(top[1], n, run_id, kind, seq, head, at)
    if rows is not None:
        rows.append((n, run_id, kind, seq, head, top[1], value, at))
    else:
        execute(_sql(_INSERT, pg), (n, run_id, kind, seq, head, top[1], value, at))
    if move:
        execute(_sql(_MOVE, pg), (n, value))
    return n, value


#: :func:`append` of an ``end`` row on PostgreSQL as common table expressions of the statement of the
#: commit that ends the run (:meth:`flowctl.store.hot.HotPath.commit`), the hash made by the server:
#: written only if ``{done}`` (the CTE the commit's UPDATE returns from) has a row, i.e. the UPDATE
#: matched, else nothing; the head row is locked only for the rest of that one statement. The hashed
#: text is ``prev_hash``, then :func:`row_hash`'s JSON body with ``n`` put in by the server
#: (:func:`end_params`, its keys prefixed ``l_``).
END_CTES_PG = ("lh AS (SELECT n + 1 AS n, hash AS prev FROM flowctl_ledger_head "
               "WHERE id = 1 AND EXISTS (SELECT 1 FROM {done}) FOR UPDATE), "
               "lr AS (SELECT n, prev, encode(sha256(convert_to(prev || %(l_pre)s || n::text || %(l_post)s, 'UTF8')), "
               "'hex') AS hash FROM lh), "
               "li AS (INSERT INTO flowctl_ledger (n, run_id, kind, run_head_seq, run_head_hash, prev_hash, hash, at) "
               "SELECT n, %(l_run_id)s, 'end', %(l_seq)s, %(l_head)s, prev, hash, %(l_at)s FROM lr), "
               "lu AS (UPDATE flowctl_ledger_head SET n = lr.n, hash = lr.hash FROM lr WHERE flowctl_ledger_head.id = 1)")

_N_MARK = -7466135  # a number no row has, where the body's n goes


def end_params(run_id: str, seq: int, head: str, at: float | None = None) -> dict:
    """The parameters of :data:`END_CTES_PG` (without its ``l_`` prefix): the JSON body
    :func:`row_hash` hashes, split where ``n`` goes (``pre`` … ``post``), so the server's hash is
    exactly :func:`row_hash`'s."""
    at = time.time() if at is None else float(at)
    body = json.dumps({"n": _N_MARK, "run_id": run_id, "kind": "end", "run_head_seq": seq, "run_head_hash": head,
                       "at": at}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    pre, post = body.split(f'"n":{_N_MARK}', 1)
    return {"run_id": run_id, "seq": int(seq), "head": head, "at": at, "pre": pre + '"n":', "post": post}


def sa_append(conn, pg: bool, run_id: str, kind: str) -> tuple:
    """:func:`append` on a SQLAlchemy connection in a transaction."""
    return append(conn.exec_driver_sql, pg, run_id, kind)


def adopt(conn, pg: bool) -> int:
    """Schema 11's upgrade step: the head row, and an ``adopt`` row for every run in the store (id
    order, with its head as it stands: the upgrade trusts the store it upgrades). Safe to repeat:
    runs already in the ledger are not adopted again. Returns the number adopted."""
    execute = conn.exec_driver_sql
    if execute(_HEAD, ()).fetchone() is None:
        execute("INSERT INTO flowctl_ledger_head (id, n, hash) VALUES (1, 0, '')", ())
    listed = {r[0] for r in execute("SELECT DISTINCT run_id FROM flowctl_ledger", ()).fetchall()}
    ids = [r[0] for r in execute("SELECT id FROM flowctl_runs ORDER BY id", ()).fetchall() if r[0] not in listed]
    for run_id in ids:
        append(execute, pg, run_id, "adopt")
    return len(ids)


class MemoryLedger:
    """The ledger of a :class:`~flowctl.store.memory.MemoryStore`: the same rows, in a list (the
    caller holds the store's lock)."""

    def __init__(self):
        self.rows: list = []

    def append(self, run_id: str, kind: str, seq: int, head: str) -> None:
        prev = self.rows[-1]["hash"] if self.rows else ""
        n, at = len(self.rows) + 1, time.time()
        self.rows.append({"n": n, "run_id": run_id, "kind": kind, "run_head_seq": seq, "run_head_hash": head,
                          "prev_hash": prev, "hash": row_hash(prev, n, run_id, kind, seq, head, at), "at": at})


class LedgerReport:
    """What :func:`verify` found: ``problems`` (strings, each naming the run or row), ``head``
    (``(n, hash)`` of the last row, ``(0, "")`` for none), ``rows`` and ``runs`` (counts read),
    ``anchors`` (the hashes found at an anchored row's ``n``)."""

    def __init__(self):
        self.problems: list = []
        self.head = (0, "")
        self.rows = self.runs = 0
        self.anchors: set = set()

    @property
    def head_text(self) -> str:
        return f"{self.head[0]}:{self.head[1]}"


def _check_chain(report: LedgerReport, rows, expected: dict) -> None:
    """Feed ledger rows (dicts, ``n`` order) into the chain check; ``expected[run_id]`` becomes the
    latest ``(kind, seq, hash)`` recorded for each run."""
    prev_n, prev_hash = report.head
    for row in rows:
        report.rows += 1
        n = row["n"]
        if n != prev_n + 1:
            report.problems.append(f"ledger rows {prev_n + 1}-{n - 1} are missing (removed from the store)")
        elif row["prev_hash"] != prev_hash:
            report.problems.append(f"ledger row {n} does not follow row {prev_n} (prev_hash differs)")
        value = row_hash(row["prev_hash"], n, row["run_id"], row["kind"], row["run_head_seq"], row["run_head_hash"],
                         row["at"])
        if value != row["hash"] or row["kind"] not in KINDS:
            report.problems.append(f"ledger row {n} (run {row['run_id']}) was edited: its hash does not match it")
        prev_n, prev_hash = n, row["hash"]
        expected[row["run_id"]] = (row["kind"], row["run_head_seq"], row["run_head_hash"])
    report.head = (prev_n, prev_hash)


def _check_run(report: LedgerReport, run_id: str, seq: int, head: str, ended: bool, recorded) -> None:
    report.runs += 1
    if recorded is None:
        report.problems.append(f"run {run_id} is in the store but not in the ledger (inserted outside flowctl)")
        return
    kind, want_seq, want_hash = recorded
    if kind in ("end", "prune") and ended:  # (a redriven run goes on from its recorded end)
        if (seq, head or "") != (want_seq, want_hash):
            report.problems.append(f"run {run_id}: its head is {seq}:{head[:12]}, the ledger recorded "
                                   f"{want_seq}:{want_hash[:12]} when it {'ended' if kind == 'end' else 'was pruned'}")
    elif (seq or 0) < want_seq:
        report.problems.append(f"run {run_id}: its head is at {seq}, behind the {want_seq} the ledger recorded")


def _finish(report: LedgerReport, expected: dict, seen: set, head_row, expect_head) -> LedgerReport:
    for run_id in sorted(set(expected) - seen):
        report.problems.append(f"run {run_id} is in the ledger but not in the store (deleted)")
    if head_row is not None and tuple(head_row) != report.head:
        report.problems.append(f"the ledger head row says {head_row[0]}:{head_row[1][:12]}, the chain ends at "
                               f"{report.head[0]}:{report.head[1][:12]} (rows removed or edited)")
    if expect_head is not None:
        n, value = expect_head
        if report.head[0] < n:
            report.problems.append(f"the ledger ends at row {report.head[0]}, before the anchored head {n} "
                                   "(its last rows were removed)")
        elif n and value not in report.anchors:
            report.problems.append(f"ledger row {n} is not the anchored {value[:12]} (the chain was rewritten)")
    return report


def verify(store, expect_head: tuple | None = None) -> LedgerReport:
    """Check the ledger of ``store`` (SqlStore or MemoryStore) against its runs; see the module
    docstring. ``expect_head``: ``(n, hash)`` kept outside the store, which the chain must hold.
    Memory: one ``(kind, seq, hash)`` per run the ledger names. Raises
    :class:`~flowctl.errors.RecordTampered` when the ledger's tables cannot be read."""
    report = LedgerReport()
    expected: dict = {}
    want = expect_head[0] if expect_head else None

    def feed(rows):
        rows = list(rows)
        _check_chain(report, rows, expected)
        if want is not None:
            report.anchors.update(r["hash"] for r in rows if r["n"] == want)

    if not hasattr(store, "engine"):  # MemoryStore
        feed(store.ledger.rows)
        seen = set()
        for run in store.ledger_runs():
            seen.add(run[0])
            _check_run(report, *run, expected.get(run[0]))  # (id, seq, hash, ended)
        return _finish(report, expected, seen, None, expect_head)
    store._open_sa()
    try:
        return _verify_sql(store, report, expected, feed, expect_head)
    except store.sa.exc.DBAPIError as exc:
        from flowctl.errors import RecordTampered, first_line

        raise RecordTampered(f"the ledger of runs cannot be read in {store.safe_url}: {first_line(exc.orig or exc)} "
                             "(its tables were dropped, or the store was written by flowctl before schema 11 and "
                             "its version row set forward)",
                             hint="restore the store from a backup; flowctl audit verify RUN still checks each run") from None


def _verify_sql(store, report: LedgerReport, expected: dict, feed, expect_head) -> LedgerReport:
    from flowctl.store.records import FINAL

    with store.engine.connect() as conn:
        execute = conn.exec_driver_sql
        head_row = execute(_HEAD, ()).fetchone()
        last = 0
        while True:
            rows = execute(_sql("SELECT n, run_id, kind, run_head_seq, run_head_hash, prev_hash, hash, at "
                                f"FROM flowctl_ledger WHERE n > ? ORDER BY n LIMIT {BATCH}", store.pg), (last,)).mappings().all()
            if not rows:
                break
            feed(rows)
            last = rows[-1]["n"]
        seen: set = set()
        after = ""
        order = ' COLLATE "C"' if store.pg else ""
        while True:
            runs = execute(_sql(f"SELECT id, last_seq, last_hash, status FROM flowctl_runs WHERE id{order} > ? "
                                f"ORDER BY id{order} LIMIT {BATCH}", store.pg), (after,)).fetchall()
            if not runs:
                break
            for run_id, seq, head, status in runs:
                seen.add(run_id)
                _check_run(report, run_id, seq, head or "", status in FINAL, expected.get(run_id))
            after = runs[-1][0]
    return _finish(report, expected, seen, None if head_row is None else (head_row[0], head_row[1]), expect_head)
