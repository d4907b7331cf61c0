"""The gate's lane: where the gate route's blocking work runs, off the event loop (:class:`Lane`)."""
from __future__ import annotations

import asyncio
import queue
import threading


class Lane:
    """Where the gate route's blocking work runs, off the event loop.

    ``await lane.batch(handler, job)`` is ``handler([job, …])[k]`` called on another thread: the jobs queued for the same ``handler`` while the lane was busy
    are handed to it together, and each caller gets its own result (a returned exception is
    raised to its caller alone).

    On a SQLite store the lane is **one** thread kept for the gate: SQLite writes one transaction
    at a time anyway, and the checks that arrive while one batch is being written are written
    together in the next (:func:`check_many`: one ``BEGIN IMMEDIATE`` … ``COMMIT`` for all of
    them, one savepoint each), which is how 8 concurrent clients cost fewer commits than 8. A hop
    to it also costs less than one through FastAPI's shared thread pool (capacity limiter, cancel
    scope). On PostgreSQL, where checks of different functions commit in parallel, each job runs
    alone on Starlette's thread pool. ``close()`` stops the thread (the server's shutdown)."""

    def __init__(self, store):
        self._queue = None
        if not getattr(store, "pg", False):
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, name="flowctl-gate", daemon=True)
            self._thread.start()

    async def batch(self, handler, job):
        if self._queue is None:
            from starlette.concurrency import run_in_threadpool

            out = (await run_in_threadpool(handler, [job]))[0]
        else:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._queue.put((handler, job, loop, future))
            out = await future
        if isinstance(out, BaseException):
            raise out
        return out

    def _serve(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:  # what queued up meanwhile goes in the same batch
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is None for item in items)
            groups: dict = {}
            for item in items:
                if item is not None:
                    groups.setdefault(item[0], []).append(item)
            for handler, group in groups.items():
                try:
                    results = handler([job for _, job, _, _ in group])
                except Exception as exc:  # noqa: BLE001 - the handler's own failure: every job of it gets it
                    results = [exc] * len(group)
                for (_, _, loop, future), result in zip(group, results):
                    loop.call_soon_threadsafe(_settle, future, result)
            if stop:
                return

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._thread.join()


def _settle(future, result) -> None:
    if not future.done():  # a caller that went away (the client disconnected) is not answered
        future.set_result(result)


__all__ = ["Lane"]
