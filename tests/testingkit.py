"""Moved to :mod:`support.testingkit` (tests/support/testingkit.py); this re-export keeps ``from testingkit import …``
working for tests written before the move, until they are rewritten."""
from support.testingkit import *  # noqa: F401,F403
