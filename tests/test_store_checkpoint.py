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
