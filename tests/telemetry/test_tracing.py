"""``flowctl.telemetry.tracing``: off costs nothing and imports nothing; on, a run's spans form one
trace across processes, errors mark their spans, and OTLP/HTTP export reaches a real receiver."""
from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading

import pytest

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the flowctl[otel] extra is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from flowctl.errors import ToolUnavailable  # noqa: E402
from flowctl.telemetry import tracing  # noqa: E402

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.reset()


def _py(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_off_by_default_it_imports_nothing_and_answers_none():
    done = _py("import sys\nfrom flowctl.telemetry import tracing\n"
               "assert tracing.tracer() is None\n"
               "assert tracing.run_span('r', 'f', None) == (None, None)\n"
               "assert tracing.child_span(None, 'x', {}) is None\n"
               "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))", CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_sdk_disabled_wins_over_an_endpoint():
    env = dict(CLEAN_ENV, OTEL_SDK_DISABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    done = _py("from flowctl.telemetry import tracing\nprint(tracing.tracer())", env)
    assert done.stdout.strip() == "None", done.stderr


def test_a_resumed_run_continues_the_same_trace(spans):
    first, carrier = tracing.run_span("r1", "order_return", None)
    assert carrier and carrier["traceparent"].startswith("00-")
    step = tracing.child_span(first, "flowctl.step validate_order", {"flowctl.state": "validate_order"})
    tracing.end(step, outcome="ok")
    tracing.end(first, outcome="paused")
    again, kept = tracing.run_span("r1", "order_return", carrier, resumed=True)  # another process, same carrier
    assert kept is carrier
    tracing.end(again, outcome="succeeded")
    done = spans.get_finished_spans()
    (step1,) = [s for s in done if s.name == "flowctl.step validate_order"]
    run1, run2 = sorted((s for s in done if s.name == "flowctl.run order_return"),
                        key=lambda s: s.attributes["flowctl.resumed"])
    assert run1.context.trace_id == step1.context.trace_id == run2.context.trace_id
    assert step1.parent.span_id == run1.context.span_id and run2.parent.span_id == run1.context.span_id
    assert run2.attributes["flowctl.outcome"] == "succeeded"


def test_an_error_marks_its_span_with_the_stable_code(spans):
    run, _ = tracing.run_span("r2", "f", None)
    call = tracing.child_span(run, "flowctl.tool pay", {"flowctl.tool": "pay@1.0.0", "flowctl.attempt": 1})
    tracing.end(call, outcome="failed", error=ToolUnavailable("gateway down"))
    tracing.end(run, outcome="failed", error={"type": "ToolUnavailable", "code": "TOOL_UNAVAILABLE",
                                              "message": "gateway down"})
    for s in spans.get_finished_spans():
        assert s.attributes["flowctl.error_code"] == "TOOL_UNAVAILABLE"
        assert s.status.status_code.name == "ERROR" and "gateway down" in s.status.description


def test_tool_headers_carry_the_current_span():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        run, _ = tracing.run_span("r3", "f", None)
        call = tracing.child_span(run, "flowctl.tool t", {})
        sent = tracing.headers(call)
        tracing.end(call)
        tracing.end(run)
    finally:
        tracing.reset()
    span = [s for s in exporter.get_finished_spans() if s.name == "flowctl.tool t"][0]
    assert sent["traceparent"].split("-")[1:3] == [f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"]


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).got.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_spans_reach_a_real_otlp_http_receiver_from_the_environment():
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="no OTLP/HTTP exporter installed")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _Receiver.got = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = dict(CLEAN_ENV, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
                   OTEL_SERVICE_NAME="flowctl-test")
        done = _py("from flowctl.telemetry import tracing\n"
                   "span, carrier = tracing.run_span('r9', 'signup', None)\n"
                   "tracing.end(span, outcome='succeeded')\n", env)  # atexit flushes the batch
        assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
    assert _Receiver.got, "nothing was exported"
    path, ctype, body = _Receiver.got[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    request = ExportTraceServiceRequest.FromString(body)
    names = [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    service = [a.value.string_value for rs in request.resource_spans for a in rs.resource.attributes
               if a.key == "service.name"]
    assert names == ["flowctl.run signup"] and service == ["flowctl-test"]
