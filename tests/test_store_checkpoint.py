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


def test_beside_a_writer_that_never_stops_the_log_stays_bounded(tmp_path, monkeypatch):
    """A checkpoint that writers keep appending to never reaches the log's end (and the log starts
    over only after one does): past CATCH_UP_FRAMES the checkpoint holds the write lock of this
    process's writers until it has caught up."""
    import threading

    from flowctl.store import checkpoint
    from flowctl.store.servicelog import write_lock

    monkeypatch.setattr(checkpoint, "CATCH_UP_FRAMES", 300)
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
        assert rows > 2000  # the writer went on the whole time
        assert wal.stat().st_size < 3_000_000  # 300 frames and what one tick adds, not a page per row
    finally:
        stop.set()
        checkpoints.close()
        store.close()
