"""A property-based API test: schemathesis generates requests from /openapi.json for every
operation; no answer is a 5xx and every answer matches the documented schema (skipped, saying why,
without schemathesis)."""
from __future__ import annotations

import hypothesis
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install schemathesis)")

from conftest import Api  # noqa: E402 - after the skip


def test_no_5xx_and_every_answer_matches_the_schema(tmp_path):
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

    api = Api(tmp_path, rate=1e6, burst=10**6)
    try:
        headers = api.key("root", "admin")
        api.service.engine.run("charge", {"amount": 10, "card": "4111-2222-3333-4444"})  # something to list
        schema = schemathesis.openapi.from_asgi("/openapi.json", api.asgi)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 8
        checks = [not_a_server_error, response_schema_conformance, status_code_conformance]
        for operation in operations:
            @hypothesis.given(case=operation.as_strategy())
            @hypothesis.settings(max_examples=20, deadline=None, database=None,
                                 suppress_health_check=list(hypothesis.HealthCheck))
            def check(case):
                case.call_and_validate(headers=headers, checks=checks)

            check()
    finally:
        api.close()
