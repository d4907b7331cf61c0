"""flowctl.store.checkpoint: WAL checkpoints on a thread of their own, none inside a commit."""
from __future__ import annotations

from flowctl.store.checkpoint import Checkpointer
from flowctl.store.sql import open_store


def _write(store, n: int) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, pad TEXT)")
    for i in range(n):  # one commit per row, each on a pooled connection of the store
        with store.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO filler (pad) VALUES (?)", ("x" * 3000,))


def test_after_start_no_commit_of_this_process_checkpoints_and_close_checkpoints_once(tmp_path):
    path = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{path}", create=True)
    checkpoints = Checkpointer(store, every=3600)
    try:
        assert checkpoints.start()
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        _write(store, 1500)  # about 4.5 MB, well past SQLite's automatic checkpoint at 1,000 pages (4 MB)
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 4_000_000 and path.stat().st_size < 1_000_000  # still only in the WAL ...
    finally:
        checkpoints.close()  # ... until the checkpointer's last one copies it into the database
        store.close()
    assert path.stat().st_size > 4_000_000


def test_a_store_without_sqlite_has_nothing_to_checkpoint():
    from flowctl.store.memory import MemoryStore

    assert Checkpointer(MemoryStore()).start() is False


def test_the_wal_starts_over_even_when_a_commit_is_in_flight_during_every_checkpoint(tmp_path):
    """(break-it finding: SQLite starts its log over only at a write that begins once every frame is
    copied back; with the checkpoint on a thread of its own, under steady gate traffic a commit
    was in flight during every checkpoint and the WAL grew by every commit: 1.3 GB in 10 s.)
    Injected: each commit holds the process's write lock (as the gate's do) and is open while the
    checkpointer runs; the WAL file stays near SQLite's own bound (1,000 pages)."""
    import threading

    from flowctl.store.servicelog import write_lock
    from support.interleave import WatchedLock

    path = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{path}", create=True)
    checkpoints = Checkpointer(store, every=3600)
    try:
        assert checkpoints.start()
        _write(store, 1)
        watched = store.__dict__["_service_write_lock"] = WatchedLock()
        assert write_lock(store) is watched
        proxied = store.engine.raw_connection()
        proxied.detach()
        writer, mine = proxied.dbapi_connection, store.engine.raw_connection()
        mine.detach()
        mine = mine.dbapi_connection
        for _ in range(400):  # ~3 pages a commit: 1,200 pages in all
            progressed = watched.waiting = threading.Event()  # the checkpointer waits for the lock, or is done
            with watched.lock:
                writer.execute("BEGIN IMMEDIATE")
                writer.execute("INSERT INTO filler (pad) VALUES (?)", ("x" * 9000,))
                t = threading.Thread(target=lambda: (checkpoints._checkpoint(mine), progressed.set()))
                t.start()
                assert progressed.wait(10)
                writer.execute("COMMIT")
            t.join(10)
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size < 1100 * 4096, wal.stat().st_size
        assert store.engine.connect().exec_driver_sql("SELECT count(*) FROM filler").scalar() == 401
    finally:
        checkpoints.close()
        store.close()


def test_beside_a_writer_that_never_stops_the_log_stays_bounded(tmp_path, monkeypatch):
    """A checkpoint that writers keep appending to never reaches the log's end (and the log starts
    over only after one does): past RESTART_PAGES the checkpoint copies the rest holding the write
    lock of this process's writers."""
    import threading

    from flowctl.store import checkpoint
    from flowctl.store.servicelog import write_lock

    monkeypatch.setattr(checkpoint, "RESTART_PAGES", 300)
    path = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{path}", create=True)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE filler (id INTEGER PRIMARY KEY, pad TEXT)")
    checkpoints = Checkpointer(store, every=0.005)
    stop = threading.Event()

    def writer():  # the gate's writers: a commit every 0.2 ms or so, each under the process's write lock
        raw = store.engine.raw_connection()
        try:
            while not stop.is_set():
                with write_lock(store):
                    raw.dbapi_connection.execute("BEGIN IMMEDIATE")
                    raw.dbapi_connection.execute("INSERT INTO filler (pad) VALUES (?)", ("x" * 3000,))
                    raw.dbapi_connection.execute("COMMIT")
                stop.wait(0.0002)
        finally:
            raw.close()

    try:
        checkpoints.start()
        t = threading.Thread(target=writer)
        t.start()
        wal = path.with_name(path.name + "-wal")
        for _ in range(200):  # about 2 s of commits, each at least one page
            stop.wait(0.01)
        stop.set()
        t.join()
        rows = store.engine.connect().exec_driver_sql("SELECT count(*) FROM filler").scalar()
        assert rows > 1000  # the writer went on the whole time
        # a page or more per row had the log never started over; how many rows land between two
        # ticks depends on how this machine schedules the two threads, so the bound is a share of
        # the rows written, not a size
        pages = wal.stat().st_size // 4096
        # (typically 360 pages for 5,400 rows here; a checkpoint's own fsync, slow while other
        # processes write, lets the log grow meanwhile, so the bound leaves room for that)
        assert pages < rows // 2, (pages, rows)
    finally:
        stop.set()
        checkpoints.close()
        store.close()
