"""Evidence of a boundary crossing: a contract's ``snapshot`` of the state its side effects change.

A contract may name ``snapshot: module:function``, called as ``fn(input, call) -> dict`` (read-only:
it reads the systems the declared ``side_effects`` write, and changes nothing). For every
side-effecting call the engine takes it twice and records each as an ``effect_snapshot`` event
``{tool, phase, snapshot}``: ``phase: before`` just before the tool is invoked (committed with the
call's ``started`` record), ``phase: after`` once verify has answered (passed or failed, before any
compensation). ``flowctl audit log RUN`` therefore shows the state before and after each effect.

A snapshot that raises, times out or returns something other than a dict is recorded as
``{tool, phase, error, message}`` and the call goes on: a missing capture is itself evidence, and a
read-only helper must not decide whether a side effect happens. Values of the contract's
``sensitive`` fields are redacted as in every other event. Calls run under the contract's timeout.
"""
from __future__ import annotations

import copy

from flowctl.store.audit import redact
from flowctl.engine.tools import DEFAULT_TIMEOUT, call_with_timeout


def take_snapshot(ctx, contract, tool_input, call, phase: str) -> None:
    """Call ``contract.snapshot`` (if any) and record an ``effect_snapshot`` event for ``phase``
    (``"before"`` or ``"after"``) on ``call.state`` / ``call.attempt``. Never raises for the
    snapshot function's own failures (they are recorded)."""
    if not contract.snapshot or not contract.side_effecting:
        return
    data = {"tool": contract.ref, "phase": phase}
    try:
        fn = ctx.engine.tool_function(contract, "snapshot", ctx.tools_folder)
        taken = call_with_timeout(fn, (copy.deepcopy(tool_input), call), contract.timeout or DEFAULT_TIMEOUT,
                                  f"snapshot of {contract.ref}")
    except Exception as exc:  # noqa: BLE001 - recorded: the capture is missing, the call goes on
        data.update(error=type(exc).__name__, message=str(exc))
    else:
        if isinstance(taken, dict):
            data["snapshot"] = redact(taken, contract.sensitive)
        else:
            data.update(error="SchemaMismatch", message=f"snapshot returned {type(taken).__name__}; it must return a dict")
    ctx.emit("effect_snapshot", call.state, call.attempt, **data)
