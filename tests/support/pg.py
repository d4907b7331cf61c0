"""A throw-away PostgreSQL database per test, on the server of this machine (or FLOWCTL_TEST_PG).

Tests that use :func:`pg_url` are skipped, with the reason, when no server answers.
"""
from __future__ import annotations

import os
import uuid

import pytest

SERVER = os.environ.get("FLOWCTL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _admin():
    import psycopg

    return psycopg.connect(SERVER, connect_timeout=3, autocommit=True)


def server_reason():
    """None when the server answers, else why the PostgreSQL tests skip."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'flowctl[postgres]')"
    try:
        _admin().close()
    except Exception as exc:  # noqa: BLE001
        return f"no PostgreSQL server at {SERVER}: {str(exc).strip().splitlines()[0]}"
    return None


#: The key every flowctl process of a PostgreSQL test shares (``FLOWCTL_SECRET_KEY`` is required
#: there for flows with sensitive fields); a test about its absence unsets it.
TEST_SECRET_KEY = "dGVzdC1rZXktb2YtdGhlLWZsb3djdGwtdGVzdC1zdWk="


@pytest.fixture
def pg_url(monkeypatch):
    """URL of a fresh, empty database; dropped after the test. ``FLOWCTL_SECRET_KEY`` is set."""
    reason = server_reason()
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", TEST_SECRET_KEY)
    name = f"flowctl_t_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = SERVER.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
