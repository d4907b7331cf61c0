"""Fixtures of the console tests: the console project's app (support.consolekit)."""
from __future__ import annotations

import pytest

from support.consolekit import Console


@pytest.fixture
def console(tmp_path):
    c = Console(tmp_path)
    yield c
    c.close()
