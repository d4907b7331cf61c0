"""Prometheus' text exposition format (0.0.4) of the health figures
(:func:`flowctl.store.health.health`): ``flowctl stats --format prometheus`` and ``GET /metrics``
of ``flowctl serve``. Gauges (and one histogram) over the counted runs (the latest ``limit``
top-level runs, optionally of one flow), so a scrape shows the window the figures cover, not
counters since a start.

Families (``flow`` label on every sample when ``flow`` is given, except ``flowctl_runs``, which
has its own):

* ``flowctl_runs{flow, status}``; ``flowctl_success_ratio``;
* ``flowctl_tool_calls{tool}``, ``flowctl_tool_failures{tool}``, ``flowctl_tool_call_seconds{quantile}``
  and the histogram ``flowctl_step_seconds{tool, le}`` (``_bucket``, ``_sum``, ``_count``; bounds
  :data:`flowctl.store.history.LATENCY_BOUNDS`);
* ``flowctl_gate_decisions{outcome}`` (allow, deny, review, warn);
* ``flowctl_compensations{outcome}`` (started, succeeded, failed); ``flowctl_compensation_failures``;
* ``flowctl_reviews{state}`` (requested, timed_out, pending);
* ``flowctl_model_calls{model}``, ``flowctl_model_reasks{model}``, ``flowctl_model_tokens{model,
  kind}`` (input, output), ``flowctl_model_cost{model}`` (priced calls only), ``flowctl_model_reask_ratio``;
* ``flowctl_defence_ratio{rate}``, ``flowctl_defence_threshold_ratio{rate}``.
"""
from __future__ import annotations


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**pairs) -> str:
    return ",".join(f'{k}="{_label(v)}"' for k, v in pairs.items())


def prometheus(s: dict, flow: str | None = None) -> str:
    """The figures of ``s`` (:func:`flowctl.store.health.health`) in Prometheus' text format 0.0.4."""
    base = _labels(flow=flow) if flow else ""
    lines = []

    def metric(name, kind, help_text, samples, scoped=True):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value, *suffix in samples:
            both = ",".join(x for x in ((base if scoped else ""), labels) if x)
            sample = name + (suffix[0] if suffix else "")
            lines.append(f"{sample}{{{both}}} {value}" if both else f"{sample} {value}")

    by_flow = s.get("by_flow") or ({flow or "": s["by_status"]})
    metric("flowctl_runs", "gauge", "Runs counted (the latest --limit top-level runs), by flow and status.",
           [(_labels(flow=f, status=k), v) for f, per in sorted(by_flow.items()) for k, v in sorted(per.items())],
           scoped=False)
    if s["success_rate"] is not None:
        metric("flowctl_success_ratio", "gauge", "Succeeded over finished runs.", [("", s["success_rate"])])
    tools = sorted(s["tools"].items())
    metric("flowctl_tool_calls", "gauge", "Tool calls of the counted runs, by tool.",
           [(_labels(tool=t), d["calls"]) for t, d in tools])
    metric("flowctl_tool_failures", "gauge", "Failed tool calls of the counted runs, by tool.",
           [(_labels(tool=t), d["failures"]) for t, d in tools])
    metric("flowctl_tool_call_seconds", "gauge", "Tool call duration quantiles, in seconds.",
           [('quantile="0.5"', s["step_ms"]["p50"] / 1000), ('quantile="0.99"', s["step_ms"]["p99"] / 1000)])
    hist = []
    for tool, h in sorted((s.get("latency") or {}).items()):
        for bound, n in h["le"]:
            hist.append((_labels(tool=tool, le=bound), n, "_bucket"))
        hist += [(_labels(tool=tool, le="+Inf"), h["count"], "_bucket"), (_labels(tool=tool), h["sum_s"], "_sum"),
                 (_labels(tool=tool), h["count"], "_count")]
    metric("flowctl_step_seconds", "histogram", "Tool call (step) latency, in seconds, by tool.", hist)
    metric("flowctl_gate_decisions", "gauge", "Gate decisions by outcome (warn: soft-rule warnings).",
           [(_labels(outcome=k), v) for k, v in (s.get("gate") or {}).items()])
    metric("flowctl_compensations", "gauge", "Compensations (undos) started, succeeded and failed.",
           [(_labels(outcome=k), v) for k, v in (s.get("compensations") or {}).items()])
    metric("flowctl_compensation_failures", "gauge", "Undos that failed for good (residue).",
           [("", s["compensation_failures"])])
    metric("flowctl_reviews", "gauge", "Reviews requested, timed out, and pending now (paused runs).",
           [(_labels(state=k), v) for k, v in (s.get("reviews") or {}).items()])
    models = s.get("models") or {}
    by_model = sorted((models.get("by_model") or {}).items())
    metric("flowctl_model_calls", "gauge", "Model calls (model_called), by model.",
           [(_labels(model=m), u["calls"]) for m, u in by_model])
    metric("flowctl_model_reasks", "gauge", "Model calls that were re-asks, by model.",
           [(_labels(model=m), u["reasks"]) for m, u in by_model])
    metric("flowctl_model_tokens", "gauge", "Model tokens, by model and kind (input, output).",
           [(_labels(model=m, kind=k), u[f"{k}_tokens"]) for m, u in by_model for k in ("input", "output")])
    metric("flowctl_model_cost", "gauge", "Model cost by the prices of models.yaml (priced models only).",
           [(_labels(model=m), u["cost"]) for m, u in by_model if u["cost"] is not None])
    if models.get("reask_rate") is not None:
        metric("flowctl_model_reask_ratio", "gauge", "Re-asks over model calls.", [("", models["reask_rate"])])
    defence = s.get("defence") or {}
    metric("flowctl_defence_ratio", "gauge", "The defence rates (fractions); absent when undefined.",
           [(_labels(rate=name), d["rate"]) for name, d in defence.items() if d["rate"] is not None])
    metric("flowctl_defence_threshold_ratio", "gauge", "Each defence rate's alert threshold.",
           [(_labels(rate=name), d["threshold"]) for name, d in defence.items()])
    return "\n".join(lines) + "\n"


__all__ = ["prometheus"]
