"""The run engine. ``from flowctl.engine import Engine, RunResult`` works; the names load on
first use, so importing a submodule (``flowctl.engine.clock``) does not pull the store in.

Where things are (each module imports only those above it in this list, never the CLI):

- ``cursor`` the typed checkpoint; ``result`` RunResult; ``tokens`` review tokens;
  ``clock``, ``payload``, ``tools``, ``evidence``, ``saga``, ``flowfiles``, ``sensitive``;
- ``context`` RunContext: what a state handler sees (emit, commit, park, scope, goto);
- ``gatecall`` the policy gate for one call; ``calls`` one tool call (and crash recovery);
- ``fanout`` the child-run plan of parallel/map/subflow; ``transitions`` taking a transition;
- ``states/`` one module per state type and the ``HANDLERS`` table;
- ``cancel``; ``loop`` the step loop and error layers (Runner); ``lifecycle`` start, resume,
  recover; ``launchers`` who runs child runs (threads, or queued for workers);
- ``engine`` the public face (Engine); ``runner`` old names, re-exported.
"""
from __future__ import annotations

_LAZY = {"Engine": "flowctl.engine.engine", "RunResult": "flowctl.engine.engine"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flowctl.engine' has no attribute {name!r}")
