"""Moved to :mod:`support.enginekit` (tests/support/enginekit.py); this re-export keeps ``from enginekit import …``
working for tests written before the move, until they are rewritten."""
from support.enginekit import *  # noqa: F401,F403
