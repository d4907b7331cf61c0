"""Interleavings injected into tests (no sleeps): a lock that tells when a thread waits for it."""
from __future__ import annotations

import threading


class WatchedLock:
    """A lock that tells when someone starts waiting for it (the interleaving, injected)."""

    def __init__(self):
        self.lock, self.waiting = threading.Lock(), threading.Event()

    def acquire(self, blocking: bool = True) -> bool:
        if not blocking:  # a try, not a wait: nothing to tell
            return self.lock.acquire(blocking=False)
        self.waiting.set()
        return self.lock.acquire()

    def release(self) -> None:
        self.lock.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()
