"""The run engine: ``Engine``, the step loop, error layers, the gate call, the saga, tools.

``from flowctl.engine import Engine, RunResult`` works as before the package split; the names load
on first use, so importing a submodule (``flowctl.engine.clock``) does not pull the store in.
"""
from __future__ import annotations

_LAZY = {"Engine": "flowctl.engine.engine", "RunResult": "flowctl.engine.engine"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flowctl.engine' has no attribute {name!r}")
