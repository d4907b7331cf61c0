"""Store fixtures for tests that run on every kind of store: ``store`` (memory, SQLite, PostgreSQL)
and ``sql_store`` (SQLite, PostgreSQL). Import both names into a test module to use them; the
PostgreSQL cases carry the ``postgres`` mark and skip, saying why, where no server answers."""
from __future__ import annotations

import pytest

from support.pg import pg_url  # noqa: F401 - fixture

SQL_STORES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def open_param_store(request, tmp_path):
    """A new, empty store of the kind ``request.param`` names."""
    from flowctl.store.sql import MemoryStore, open_store

    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    return open_store(request.getfixturevalue("pg_url"), create=True)


@pytest.fixture(params=["memory", *SQL_STORES])
def store(request, tmp_path):
    found = open_param_store(request, tmp_path)
    yield found
    found.close()


@pytest.fixture(params=SQL_STORES)
def sql_store(request, tmp_path):
    """The SQL stores (what the memory store does not have: batches, summaries)."""
    found = open_param_store(request, tmp_path)
    yield found
    found.close()
