"""flowctl: a declarative workflow runtime.

Library API (the CLI is a thin layer over it)::

    import flowctl
    project = flowctl.load_project(".")          # -> flowctl.definition.model.Project
    problems = flowctl.validate(project)         # -> list[flowctl.Diagnostic]
    data = flowctl.dataflow(project, "order_return")  # -> flowctl.check.dataflow.FlowData (what is defined where)
    engine = flowctl.Engine(project, flowctl.open_store("sqlite:///.flowctl/flowctl.db"))
    result = engine.run("order_return", {"order_id": "A-1"})   # -> flowctl.RunResult

Tools raise :class:`ToolError` (``ToolError("Payments.CardDeclined", "…")``),
:class:`ToolUnavailable` or :class:`ToolThrottled`; the error hierarchy is drawn in
:mod:`flowctl.errors`. Heavy modules (the engine, the store, graphs) load on first use, so
``import flowctl`` stays cheap.
"""
from __future__ import annotations

from flowctl.diagnostics import Diagnostic
from flowctl.errors import (BoundaryViolation, BranchFailed, CompensationFailed, ExpressionError, FlowctlError,
                     MaxStepsExceeded, NoTransitionMatched, PolicyDenied, ReviewTimeout, SchemaMismatch,
                     StepError, ToolError, ToolThrottled, ToolTimeout, ToolUnavailable)

__version__ = "0.1.0"

_LAZY = {
    "load_project": ("flowctl.definition.loader", "load_project"),
    "load_files": ("flowctl.definition.loader", "load_files"),
    "validate": ("flowctl.check.checks", "validate"),
    "dataflow": ("flowctl.check.dataflow", "dataflow"),
    "Engine": ("flowctl.engine.engine", "Engine"),
    "RunResult": ("flowctl.engine.engine", "RunResult"),
    "open_store": ("flowctl.store.sql", "open_store"),
}

__all__ = ["Diagnostic", "FlowctlError", "StepError", "ToolError", "ToolUnavailable", "ToolThrottled",
           "ToolTimeout", "SchemaMismatch", "PolicyDenied", "BoundaryViolation", "NoTransitionMatched",
           "ExpressionError", "MaxStepsExceeded", "ReviewTimeout", "CompensationFailed", "BranchFailed",
           *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flowctl' has no attribute {name!r}")
