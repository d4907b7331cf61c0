"""Prometheus' text exposition format (0.0.4) of the health figures
(:func:`flowctl.store.health.health`): ``flowctl stats --format prometheus`` and ``GET /metrics``
of ``flowctl serve``. Gauges over the counted runs (the latest ``limit`` top-level runs, optionally
of one flow), so a scrape shows the window the figures cover, not counters since a start."""
from __future__ import annotations


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus(s: dict, flow: str | None = None) -> str:
    """The figures of ``s`` (:func:`flowctl.store.health.health`) in Prometheus' text format 0.0.4."""
    base = f'flow="{_label(flow)}"' if flow else ""
    lines = []

    def metric(name, kind, help_text, samples):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            both = ",".join(x for x in (base, labels) if x)
            lines.append(f"{name}{{{both}}} {value}" if both else f"{name} {value}")

    metric("flowctl_runs", "gauge", "Runs counted (the latest --limit top-level runs), by status.",
           [(f'status="{_label(k)}"', v) for k, v in sorted(s["by_status"].items())])
    if s["success_rate"] is not None:
        metric("flowctl_success_ratio", "gauge", "Succeeded over finished runs.", [("", s["success_rate"])])
    metric("flowctl_tool_calls", "gauge", "Tool calls of the counted runs, by tool.",
           [(f'tool="{_label(t)}"', d["calls"]) for t, d in sorted(s["tools"].items())])
    metric("flowctl_tool_failures", "gauge", "Failed tool calls of the counted runs, by tool.",
           [(f'tool="{_label(t)}"', d["failures"]) for t, d in sorted(s["tools"].items())])
    metric("flowctl_tool_call_seconds", "gauge", "Tool call duration quantiles, in seconds.",
           [('quantile="0.5"', s["step_ms"]["p50"] / 1000), ('quantile="0.99"', s["step_ms"]["p99"] / 1000)])
    metric("flowctl_compensation_failures", "gauge", "Undos that failed for good (residue).",
           [("", s["compensation_failures"])])
    defence = s.get("defence") or {}
    metric("flowctl_defence_ratio", "gauge", "The defence rates (fractions); absent when undefined.",
           [(f'rate="{name}"', d["rate"]) for name, d in defence.items() if d["rate"] is not None])
    metric("flowctl_defence_threshold_ratio", "gauge", "Each defence rate's alert threshold.",
           [(f'rate="{name}"', d["threshold"]) for name, d in defence.items()])
    return "\n".join(lines) + "\n"


__all__ = ["prometheus"]
