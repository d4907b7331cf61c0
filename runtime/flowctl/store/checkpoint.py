"""WAL checkpoints of a SQLite store on a thread of their own, not inside a request's commit.

SQLite in WAL mode copies the log back into the database (a *checkpoint*) in whichever commit
makes the log pass 1,000 pages, and with ``synchronous=NORMAL`` that checkpoint is where the
``fsync`` calls happen: one commit in a few hundred takes 10–30 ms instead of 30 µs (measured on
this machine), and the request waiting on it is the service's p99. :class:`Checkpointer` turns the
automatic checkpoint off on the connections this process opens from now on
(``PRAGMA wal_autocheckpoint=0``) and runs a ``PASSIVE`` checkpoint every ``every`` seconds on a
connection of its own: it never waits for a writer or a reader, and the driver releases the GIL
while it runs. SQLite starts the log over only at a write that *begins* once every frame has been
copied back; under steady traffic a commit is in flight during every such checkpoint, so when one
leaves more than :data:`RESTART_PAGES` in the log the checkpointer copies the rest holding this
process's write lock (:func:`~flowctl.store.servicelog.write_lock`, what the gate's and the
service log's commits hold): the next of them starts the log over, and it stays near SQLite's own
bound instead of growing by every commit. Other processes on the same file (``flowctl worker``,
the CLI) keep SQLite's automatic checkpoints. Nothing changes for durability: a committed
transaction is in the WAL either way.

PostgreSQL and memory stores have nothing to do: :meth:`start` returns at once for them.

:class:`CommitCheckpoints` does the same for the per-step commits of
:class:`~flowctl.store.hot.HotPath` (its connections have the automatic checkpoint off), counted in
commits rather than seconds: see that module's docstring, "Checkpoints off the commit path".
"""
from __future__ import annotations

import contextlib
import threading

from flowctl.store.servicelog import write_lock

#: frames left in the log after a checkpoint past which the next one holds the write lock
#: (SQLite's automatic checkpoint runs at 1,000 pages)
RESTART_PAGES = 1000
#: SQLite, the step commits of :class:`~flowctl.store.hot.HotPath`: commits between two WAL
#: checkpoints (a step's commit writes about 15 pages: about SQLite's own 1,000-page interval), and
#: how many the checkpoint thread may fall behind before a committing thread checkpoints itself
CHECKPOINT_EVERY = 64
CHECKPOINT_LAG = 4 * CHECKPOINT_EVERY


class Checkpointer:
    """``Checkpointer(store, every=0.2)``: :meth:`start` once, :meth:`close` when the process stops."""

    def __init__(self, store, every: float = 0.2):
        self.store = store
        self.every = every
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> bool:
        """Begin; False when the store is not SQLite (nothing to do)."""
        engine = getattr(self.store, "engine", None)
        sa = getattr(self.store, "sa", None)
        if engine is None or sa is None or getattr(self.store, "pg", True) or not hasattr(engine, "dispose"):
            return False

        @sa.event.listens_for(engine, "connect")
        def _no_auto_checkpoint(dbapi_conn, _record):
            dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

        engine.dispose()  # pooled connections opened before now had it on
        self._thread = threading.Thread(target=self._run, name="flowctl-checkpoint", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        proxied = self.store.engine.raw_connection()
        proxied.detach()  # this thread's own
        conn = proxied.dbapi_connection
        try:
            while not self._stop.wait(self.every):
                self._checkpoint(conn)
            self._checkpoint(conn)  # the last one, as the process stops
        finally:
            conn.close()

    def _checkpoint(self, conn) -> None:
        try:
            _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if frames > RESTART_PAGES:  # the log did not start over: commits landed during each checkpoint
                with write_lock(self.store):  # none now: every frame copied, the next writer starts it over
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception as exc:  # noqa: BLE001 - a failed checkpoint is tried again; commits are unaffected
            import logging  # only here: off the import path of every command that opens a store

            logging.getLogger("flowctl.store").warning("WAL checkpoint of %s failed: %s", getattr(self.store, "safe_url", "?"), exc)

    def close(self) -> None:
        """Stop the thread after a last checkpoint."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


class CommitCheckpoints:
    """The WAL checkpoints of a SQLite :class:`~flowctl.store.hot.HotPath` (see its module docstring): :meth:`committed` after
    each group commit; every :data:`CHECKPOINT_EVERY` commits a thread (started when needed, gone
    after a second without work) runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its
    own. A checkpoint that fails is left to the next one (SQLite's own automatic checkpoint
    ignores failures too)."""

    def __init__(self, connect):
        self._connect = connect  # () -> a new DBAPI connection with the automatic checkpoint off
        self._cv = threading.Condition(threading.Lock())
        self._since = 0  # commits since the last checkpoint began
        self._unreset = 0  # commits since the last checkpoint that caught up with the WAL
        self._wanted = False
        self._thread = None
        self._closed = False

    def committed(self, n: int, cur) -> None:
        """``n`` commits were just written (by ``cur``, in the group commit's leader, before the
        group's callers are told: no commit of this process runs meanwhile)."""
        with self._cv:
            self._since += n
            self._unreset += n
            if self._closed:
                return
            if self._unreset >= CHECKPOINT_LAG:  # the WAL restarts only after a checkpoint no write ran beside
                reset = True
            elif self._since >= CHECKPOINT_EVERY:
                reset = False
                self._since = 0
                self._wanted = True
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="flowctl-wal-checkpoint", daemon=True)
                    self._thread.start()
                else:
                    self._cv.notify()
            else:
                return
        if reset and _checkpoint(cur):
            with self._cv:
                self._unreset = self._since = 0

    def _run(self) -> None:
        conn = None
        try:
            while True:
                with self._cv:
                    if not self._wanted and not self._closed:
                        self._cv.wait(1.0)
                    if not self._wanted or self._closed:
                        self._thread = None
                        return
                    self._wanted = False
                if conn is None:
                    conn = self._connect()
                _checkpoint(conn)
        except Exception:  # noqa: BLE001 - no connection: the next commits start the thread again
            with self._cv:
                self._thread = None
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    conn.close()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            thread = self._thread
            self._cv.notify()
        if thread is not None:
            thread.join(5.0)


def _checkpoint(conn) -> bool:
    """A PASSIVE checkpoint on ``conn``; True if it copied the whole WAL (the next write restarts it)."""
    try:
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except Exception:  # noqa: BLE001 - the database went away: the next checkpoint copies these pages
        return False
    return not busy and frames == copied


__all__ = ["Checkpointer", "CommitCheckpoints"]
