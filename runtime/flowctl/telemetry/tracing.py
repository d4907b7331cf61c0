"""OpenTelemetry traces of runs: a span per run, per state step, per tool call, per model call and
per gate decision — and nothing at all when tracing is off.

**When it is on.** Tracing is decided once per process, on first use (:func:`tracer`):

- ``OTEL_SDK_DISABLED=true``: off.
- The host process configured a tracer provider (``opentelemetry.trace.set_tracer_provider``, e.g. an
  application using flowctl as a library, or :func:`use_provider` in tests): flowctl's spans go to it.
- Else the standard exporter variables ask for export — ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, or ``OTEL_TRACES_EXPORTER`` set to ``otlp`` or
  ``console``: flowctl builds the SDK's provider with a batch processor and the OTLP exporter
  (``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``, the default, or ``grpc``). The rest
  (service name, headers, sampling) is the SDK's own reading of ``OTEL_*``. Needs the
  ``flowctl[otel]`` extra; without it one warning is printed to stderr and tracing stays off.
- Otherwise off. When off, OpenTelemetry is not even imported, and every function here returns
  ``None`` after one global check: the cost the engine pays per step is a function call.

**One trace per run, across processes.** :func:`run_span` starts the run's span under the trace
context stored with the run (``carrier``: the W3C ``traceparent``/``tracestate`` headers as a
dict), and returns the carrier to store when the run had none. A run resumed by another process
or a worker starts a ``flowctl.run`` span (``flowctl.resumed=true``) under the stored context, so
all of a run's spans share one trace id. Tools receive the current context as
``call.trace_context`` (the same header dict) to pass into their own HTTP calls.

Span names and attributes (``flowctl.*``; model calls also follow the GenAI semantic conventions:
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``)::

    flowctl.run {flow}        flowctl.run_id, flowctl.flow, flowctl.resumed, flowctl.outcome
    └── flowctl.step {state}  flowctl.state, flowctl.state_type, flowctl.step, flowctl.attempt
        ├── flowctl.gate {tool}   flowctl.tool, flowctl.decision, flowctl.policy, flowctl.rule
        ├── flowctl.tool {tool}   flowctl.tool, flowctl.attempt, flowctl.outcome, flowctl.error_code
        ├── flowctl.compensate {tool}   flowctl.tool, flowctl.state, flowctl.outcome
        └── chat {model}          gen_ai.* and flowctl.reask

A span that ends with an error carries ``flowctl.error_code`` and the error status.
"""
from __future__ import annotations

import os
import sys

_UNSET = object()
_tracer = _UNSET  # the tracer, None (off), or _UNSET (not decided yet)
_warned = False


def tracer():
    """flowctl's ``opentelemetry.trace.Tracer``, or None when tracing is off (see the module doc)."""
    global _tracer
    if _tracer is _UNSET:
        _tracer = _configure()
    return _tracer


def use_provider(provider) -> None:
    """Send flowctl's spans to ``provider`` (an SDK ``TracerProvider``); None turns tracing off.
    For tests and hosts that build their own provider without setting the global one."""
    global _tracer
    _tracer = provider.get_tracer("flowctl", _version()) if provider is not None else None


def reset() -> None:
    """Decide again on next use (after the environment changed)."""
    global _tracer
    _tracer = _UNSET


def _wants_export() -> bool:
    env = os.environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or exporter in ("otlp", "console"))


def _configure():
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    wants = _wants_export()
    if not wants and "opentelemetry.trace" not in sys.modules:  # nobody configured it: stay off, import nothing
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        _warn("OTEL_* asks for traces, but OpenTelemetry is not installed: pip install 'flowctl[otel]'")
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider) or type(provider).__name__ == "NoOpTracerProvider":
        if not wants:
            return None
        provider = _sdk_provider()
        if provider is None:
            return None
        trace.set_tracer_provider(provider)
    return provider.get_tracer("flowctl", _version())


def _sdk_provider():
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        _warn("OTEL_* asks for traces, but the OpenTelemetry SDK is not installed: pip install 'flowctl[otel]'")
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "flowctl"})
    provider = TracerProvider(resource=resource)
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        try:
            if (protocol or "http/protobuf").strip().lower() == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            _warn(f"no OTLP exporter for protocol {protocol or 'http/protobuf'}: pip install 'flowctl[otel]' "
                  "(grpc also needs opentelemetry-exporter-otlp-proto-grpc)")
            return None
        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    import atexit

    atexit.register(provider.shutdown)  # flush what is batched before a short CLI process exits
    return provider


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"warning: {message}; tracing is off", file=sys.stderr)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("flowctl")
    except Exception:  # noqa: BLE001 - not installed as a distribution (a source checkout)
        return "0"


# ----------------------------------------------------------------------------------------- spans
def run_span(run_id: str, flow: str, carrier: dict | None, *, resumed: bool = False):
    """``(span, carrier)``: the run's span, started under ``carrier`` (the stored trace context, or
    None for a new run), and the carrier to store with the run (the new span's context when there
    was none, else ``carrier`` itself). ``(None, carrier)`` when tracing is off."""
    t = tracer()
    if t is None:
        return None, carrier
    from opentelemetry import propagate, trace

    parent = propagate.extract(carrier) if carrier else None
    span = t.start_span(f"flowctl.run {flow}", context=parent, kind=trace.SpanKind.INTERNAL,
                        attributes={"flowctl.run_id": run_id, "flowctl.flow": flow, "flowctl.resumed": resumed})
    if carrier:
        return span, carrier
    return span, headers(span)


def child_span(parent, name: str, attributes: dict):
    """A span ``name`` under ``parent`` (a span, or None for the current context); None when off
    or when ``parent`` is None because its run is not traced."""
    if parent is None:
        return None
    t = tracer()
    if t is None:
        return None
    from opentelemetry import trace

    return t.start_span(name, context=trace.set_span_in_context(parent),
                        attributes={k: v for k, v in attributes.items() if v is not None})


def annotate(span, **attributes) -> None:
    """Set attributes (those not None) on ``span``; nothing when it is None."""
    if span is not None:
        for key, value in attributes.items():
            if value is not None:
                span.set_attribute(key, value)


def end(span, *, outcome: str | None = None, error=None) -> None:
    """End ``span`` (None: nothing), with ``flowctl.outcome`` and, for an error (an exception or a
    stored error dict ``{type, code, message}``), ``flowctl.error_code``, ``flowctl.error_type``
    and the error status."""
    if span is None:
        return
    if outcome is not None:
        span.set_attribute("flowctl.outcome", outcome)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        if isinstance(error, dict):
            code, kind, message = error.get("code"), error.get("type"), error.get("message")
        else:
            code = getattr(error, "code", None) or "TOOL_ERROR"
            kind = getattr(error, "type_name", None) or type(error).__name__
            message = str(error)
        span.set_attribute("flowctl.error_code", str(code or ""))
        span.set_attribute("flowctl.error_type", str(kind or ""))
        span.set_status(Status(StatusCode.ERROR, str(message or "")[:500]))
    span.end()


def headers(span) -> dict | None:
    """The W3C trace-context headers (``{"traceparent": …[, "tracestate": …]}``) of ``span``, for a
    tool to send on; None when ``span`` is None."""
    if span is None:
        return None
    from opentelemetry import propagate, trace

    carrier: dict = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier or None


__all__ = ["tracer", "use_provider", "reset", "run_span", "child_span", "annotate", "end", "headers"]
