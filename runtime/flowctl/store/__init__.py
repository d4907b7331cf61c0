"""The run store: SQL and in-memory stores, the per-step hot path, tables, the audit chain,
history queries, the worker queue; :mod:`flowctl.store.protocol` says what every store offers.

``from flowctl.store import open_store`` works as before the package split; the name loads on first
use, so importing ``flowctl.store.audit`` does not import SQLAlchemy.
"""
from __future__ import annotations

_LAZY = {"open_store": "flowctl.store.sql", "SqlStore": "flowctl.store.core", "MemoryStore": "flowctl.store.memory",
         "Store": "flowctl.store.protocol", "QueueStore": "flowctl.store.protocol"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flowctl.store' has no attribute {name!r}")
