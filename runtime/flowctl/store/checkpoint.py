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
"""
from __future__ import annotations

import logging
import threading

from flowctl.store.servicelog import write_lock

log = logging.getLogger("flowctl.store")

#: frames left in the log after a checkpoint past which the next one holds the write lock
#: (SQLite's automatic checkpoint runs at 1,000 pages)
RESTART_PAGES = 1000


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
            log.warning("WAL checkpoint of %s failed: %s", getattr(self.store, "safe_url", "?"), exc)

    def close(self) -> None:
        """Stop the thread after a last checkpoint."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


__all__ = ["Checkpointer"]
