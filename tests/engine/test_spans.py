"""The engine's OpenTelemetry spans (issue 21, item 1): one trace for a run with a retry, a
fallback, a review, a compensation and a resume in another process; tools receive their span's
context; with tracing off nothing is recorded and the checkpoint carries no trace."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the flowctl[otel] extra is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import flowctl  # noqa: E402
from flowctl.engine.clock import FakeClock  # noqa: E402
from flowctl.store.sql import open_store  # noqa: E402
from flowctl.telemetry import tracing  # noqa: E402
from support.enginekit import allow_all, build, contract, effect_contract, task  # noqa: E402

TOOLS = """
LEDGER = []
SEEN = []
FAILS = {"pay": 1}

def pay(input, call):
    SEEN.append(call.trace_context)
    if FAILS["pay"]:
        FAILS["pay"] -= 1
        from flowctl import ToolUnavailable
        raise ToolUnavailable("gateway busy")
    LEDGER.append("pay")
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append("undo")

def flaky(input, call):
    from flowctl import ToolUnavailable
    raise ToolUnavailable("primary down")

def backup(input, call):
    return {"source": "backup"}

def boom(input, call):
    raise RuntimeError("after the review")
"""

FILES = {
    **effect_contract("pay", "pay"), **allow_all("pay"),
    **contract("flaky", "flaky"), **contract("backup", "backup"), **contract("boom", "boom"),
    **task("charge", "pay@^1", extra="retry:\n  - {errors: [ToolUnavailable], max_attempts: 2, interval: 1s}\n"),
    **task("lookup", "flaky@^1", extra="on_error:\n  - {errors: [ToolUnavailable], fallback: backup@^1}\n"),
    **task("explode", "boom@^1"),
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/failed.yaml": "id: failed\ntype: fail\nerror: Broken\n",
    "transitions/f.yaml": textwrap.dedent("""\
        flow: f
        start: charge
        transitions:
          - {from: charge, to: lookup}
          - {from: lookup, to: ask}
          - {from: ask, to: explode}
          - {from: explode, to: done}
        on_error:
          - {errors: ["*"], compensate: true, goto: failed}
        """),
}

RESUME = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import flowctl
from flowctl.store.sql import open_store
from flowctl.telemetry import tracing
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracing.use_provider(provider)
root, db, run_id, token = sys.argv[1:5]
engine = flowctl.Engine(flowctl.load_project(root), open_store(db), max_inline_wait=10.0)
result = engine.resume(run_id, token=token, decision="approve", by="ops")
print(json.dumps({"status": result.status, "spans": [
    {"name": s.name, "trace": f"{s.context.trace_id:032x}", "status": s.status.status_code.name,
     "attrs": {k: v for k, v in s.attributes.items()}} for s in exporter.get_finished_spans()]}))
"""


def _tracer():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    return exporter


def test_one_trace_across_a_retry_a_fallback_a_review_a_compensation_and_another_process(tmp_path):
    root = build(tmp_path, FILES, TOOLS)
    db = f"sqlite:///{tmp_path}/flowctl.db"
    exporter = _tracer()
    try:
        engine = flowctl.Engine(flowctl.load_project(root), open_store(db), clock=FakeClock(), max_inline_wait=10.0)
        paused = engine.run("f", {})
    finally:
        tracing.reset()
    assert paused.status == "paused"
    first = exporter.get_finished_spans()
    trace_ids = {f"{s.context.trace_id:032x}" for s in first}
    assert len(trace_ids) == 1
    names = [s.name for s in first]
    assert names.count("flowctl.tool pay") == 2  # the failed attempt and its retry
    assert {"flowctl.tool flaky", "flowctl.tool backup", "flowctl.gate pay", "flowctl.step ask",
            "flowctl.run f"} <= set(names)
    failed_call = [s for s in first if s.name == "flowctl.tool pay" and s.status.status_code.name == "ERROR"]
    assert failed_call and failed_call[0].attributes["flowctl.error_code"] == "TOOL_UNAVAILABLE"
    run_span = [s for s in first if s.name == "flowctl.run f"][0]
    assert run_span.attributes["flowctl.outcome"] == "paused"
    for s in first:
        if s.name.startswith("flowctl.step"):
            assert s.parent.span_id == run_span.context.span_id

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", RESUME, str(root), db, paused.run_id, paused.review["token"]],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    second = json.loads(done.stdout.strip().splitlines()[-1])
    assert second["status"] == "failed"
    assert {s["trace"] for s in second["spans"]} == trace_ids  # the same trace, from the stored context
    by_name = {s["name"]: s for s in second["spans"]}
    assert by_name["flowctl.run f"]["attrs"]["flowctl.resumed"] is True
    assert by_name["flowctl.compensate pay"]["attrs"]["flowctl.outcome"] == "compensated"
    assert by_name["flowctl.tool boom"]["status"] == "ERROR"
    assert by_name["flowctl.run f"]["attrs"]["flowctl.outcome"] == "failed"


def test_a_tool_receives_the_context_of_its_own_span(tmp_path):
    root = build(tmp_path, FILES, TOOLS)
    exporter = _tracer()
    try:
        engine = flowctl.Engine(flowctl.load_project(root), open_store(f"sqlite:///{tmp_path}/t.db"),
                                clock=FakeClock(), max_inline_wait=10.0)
        engine.run("f", {})
    finally:
        tracing.reset()
    from flowctl.engine.tools import resolve

    seen = resolve("tk:SEEN", str(root / "orchestration" / "tools"))
    calls = [s for s in exporter.get_finished_spans() if s.name == "flowctl.tool pay"]
    assert [c["traceparent"].split("-")[2] for c in seen] == [f"{s.context.span_id:016x}" for s in calls]


def test_with_tracing_off_nothing_is_traced_and_the_checkpoint_has_no_trace(tmp_path):
    tracing.use_provider(None)
    try:
        root = build(tmp_path, FILES, TOOLS)
        store = open_store(f"sqlite:///{tmp_path}/off.db")
        engine = flowctl.Engine(flowctl.load_project(root), store, clock=FakeClock(), max_inline_wait=10.0)
        paused = engine.run("f", {})
    finally:
        tracing.reset()
    from flowctl.engine.tools import resolve

    assert resolve("tk:SEEN", str(root / "orchestration" / "tools")) == [None, None]
    assert "trace" not in store.get_run(paused.run_id, exact=True)["cursor"]
