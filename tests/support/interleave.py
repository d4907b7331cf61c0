"""Interleavings injected into tests (no sleeps): a lock that tells when a thread waits for it."""
from __future__ import annotations

import threading


class WatchedLock:
    """A lock that tells when someone starts waiting for it (the interleaving, injected)."""

    def __init__(self):
        self.lock, self.waiting = threading.Lock(), threading.Event()

    def __enter__(self):
        self.waiting.set()
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()
