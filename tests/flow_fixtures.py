"""Moved to :mod:`support.flow_fixtures` (tests/support/flow_fixtures.py); this re-export keeps ``from flow_fixtures import …``
working for tests written before the move, until they are rewritten."""
from support.flow_fixtures import *  # noqa: F401,F403
