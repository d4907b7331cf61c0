"""Moved to :mod:`support.pg` (tests/support/pg.py); this re-export keeps ``from pg import …``
working for tests written before the move, until they are rewritten."""
from support.pg import *  # noqa: F401,F403
