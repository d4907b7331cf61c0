"""``flowctl cancel RUN``: stop a run and (unless --no-compensate) undo its side effects."""
from __future__ import annotations

from ._common import open_engine, print_result


def run(run_id, no_compensate, by, root, db) -> int:
    engine = open_engine(root, db, progress=True, check=False, create=False)
    try:
        result = engine.cancel(run_id, compensate=not no_compensate, by=by)
    finally:
        engine.store.close()
    print_result(result, db=db)
    return 0 if result.status == "cancelled" else 1
