"""Observability: OpenTelemetry traces of runs (:mod:`.tracing`). The lowest layer: it imports only
the root vocabulary, and OpenTelemetry itself only when tracing is on."""
