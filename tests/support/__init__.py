"""The tests' support package: helpers every test shares, imported as ``from support.helpers import …``.

* :mod:`support.helpers` — the repository paths, the ``flowctl`` console script, writing a project
  tree (``write_project``), ``MINIMAL``, and diagnostics lookups;
* :mod:`support.enginekit` — an engine on a fake clock with a memory or SQLite store;
* :mod:`support.testingkit` — the project of the flow-test (``flowctl test``) tests;
* :mod:`support.flow_fixtures` — a git history of one flow for the diff and graph tests, and the
  mermaid parser probe;
* :mod:`support.pg` — the ``pg_url`` fixture (a fresh PostgreSQL schema per test).

``tests/conftest.py`` puts ``tests/`` on ``sys.path``, so ``support`` imports under any pytest
import mode. The old top-level modules (``tests/helpers.py`` …) are thin re-exports of these for
tests written before the move.
"""
