"""How a worker's log lines look: :func:`text_logger` for people, :func:`json_logger` for machines."""
from __future__ import annotations

import json
import os
import sys
import threading
import time


def text_logger(stream=None, quiet=False):
    """Log lines for people: ``12:00:01 claimed 01a2… fence 3 (from queued)``."""
    stream = stream or sys.stdout
    lock = threading.Lock()  # one line at a time from the slots' threads (new-user finding: lines interleaved)

    def log(event, fields):
        if quiet and event not in ("worker_started", "worker_stopped", "lease_lost", "error", "claim_failed"):
            return
        stamp = time.strftime("%H:%M:%S")
        rest = " ".join(f"{k}={v}" for k, v in fields.items())
        with lock:
            print(f"{stamp} {event} {rest}", file=stream, flush=True)

    return log


def json_logger(stream=None):
    """One JSON object per line: ``{"at": …, "event": …, …fields}``."""
    stream = stream or sys.stdout
    lock = threading.Lock()

    def log(event, fields):
        line = json.dumps({"at": round(time.time(), 3), "event": event, "pid": os.getpid(), **fields}, default=str)
        with lock:
            print(line, file=stream, flush=True)

    return log


__all__ = ["text_logger", "json_logger"]
