"""Flow tests for authors: golden path cases, contract tests, coverage and replay.

=================  ==========================================================================
:mod:`.cases`      golden case files ``orchestration/tests/<flow>/*.yaml``: load and check them
                   (located ``file:line:column`` diagnostics), schema: ``flowctl schema case``
:mod:`.mocks`      the ``tool_resolver`` built from a case's ``mocks`` (no real tool is called)
:mod:`.cassettes`  model replies recorded from the real provider (``flowctl test --record``) into
                   ``orchestration/tests/<flow>/cassettes/<case>.yaml``, replayed with no network
:mod:`.runner`     run cases on a fake clock and an in-memory store; compare path, status, context;
                   path diffs
:mod:`.coverage`   transitions, handlers and error edges exercised per flow (the items and figures
                   in :mod:`.coverage_items`)
:mod:`.suggest`    input skeletons that would reach the uncovered ones (``--suggest``)
:mod:`.contract_tests`  invoke → verify → compensate → verify again, against the real tool in
                   the sandbox its package declares (``flowctl_sandbox``)
:mod:`.replay`     a recorded run re-run under another definition with the recorded tool outputs
                   and ``uuid()``/``now()`` values; the first step where the path diverges
:mod:`.recording`  the recorded run replay reads, and the tools that serve its outcomes
:mod:`.junit`      JUnit XML for CI
=================  ==========================================================================

``flowctl test`` and ``flowctl replay`` (:mod:`flowctl.cli.commands.test`, :mod:`flowctl.cli.commands.replay`)
are thin layers over these modules.
"""
from __future__ import annotations

__all__ = ["cases", "mocks", "runner", "coverage", "coverage_items", "suggest", "contract_tests", "replay",
           "recording", "junit", "cassettes"]
