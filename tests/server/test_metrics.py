"""``GET /metrics`` of ``flowctl serve`` (``flowctl.telemetry.metrics``): a scrape that
Prometheus' own parser reads, behind a key with ``runs:read``."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the flowctl[serve] extra is not installed")
parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is not installed")


def test_a_scrape_parses_and_counts_the_runs_by_status(api):
    h = api.key("prom", "runs:read")
    run = api.service.engine.run("charge", {"amount": 10})
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve")
    api.service.engine.run("charge", {"amount": 20})
    r = api.client.get("/metrics", headers=h)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in parser.text_string_to_metric_families(r.text)}
    assert {s.labels["status"]: s.value for s in families["flowctl_runs"].samples} == {"succeeded": 1.0, "paused": 1.0}
    assert {s.labels["tool"]: s.value for s in families["flowctl_tool_calls"].samples} == {"refund@1.0.0": 2.0}
    thresholds = {s.labels["rate"] for s in families["flowctl_defence_threshold_ratio"].samples}
    assert thresholds == {"validation_block_rate", "pause_timeout_rate", "rollback_failure_rate",
                          "human_takeover_rate"}


def test_a_scrape_needs_a_key_with_runs_read(api):
    assert api.client.get("/metrics").status_code == 401
    assert api.client.get("/metrics", headers=api.key("agent", "gate")).status_code == 403


def test_a_scrape_has_the_latency_histogram_gate_decisions_reviews_and_runs_by_flow(api):
    h = api.key("prom", "runs:read")
    run = api.service.engine.run("charge", {"amount": 10})
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve")
    api.service.engine.run("charge", {"amount": 20})
    families = {f.name: f for f in parser.text_string_to_metric_families(api.client.get("/metrics", headers=h).text)}
    assert {(s.labels["flow"], s.labels["status"]): s.value for s in families["flowctl_runs"].samples} == {
        ("charge", "succeeded"): 1.0, ("charge", "paused"): 1.0}
    hist = families["flowctl_step_seconds"]
    assert hist.type == "histogram"
    buckets = [s for s in hist.samples if s.name == "flowctl_step_seconds_bucket"]
    inf = [s.value for s in buckets if s.labels["le"] == "+Inf"]
    count = [s.value for s in hist.samples if s.name == "flowctl_step_seconds_count"]
    assert inf == count == [2.0] and [s.value for s in buckets] == sorted(s.value for s in buckets)
    reviews = {s.labels["state"]: s.value for s in families["flowctl_reviews"].samples}
    assert reviews["pending"] == 1.0 and reviews["requested"] == 2.0
    assert set(s.labels["outcome"] for s in families["flowctl_gate_decisions"].samples) == {"allow", "deny", "review",
                                                                                         "warn"}
    assert {s.labels["outcome"] for s in families["flowctl_compensations"].samples} == {"started", "succeeded", "failed"}
    assert "flowctl_model_tokens" in families


def test_a_flow_scoped_exposition_labels_every_sample_with_its_flow_once(api):
    from flowctl.store.health import health
    from flowctl.telemetry.metrics import prometheus

    api.service.engine.run("charge", {"amount": 20})
    text = prometheus(health(api.service.store, flow="charge"), "charge")
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert all(s.labels.get("flow") == "charge" for f in families.values() for s in f.samples)
