"""Moved to :mod:`support.helpers` (tests/support/helpers.py); this re-export keeps ``from helpers import …``
working for tests written before the move, until they are rewritten."""
from support.helpers import *  # noqa: F401,F403
