"""One exception tree: stored run errors come from errors.py, with the values stored before."""
from __future__ import annotations

import flowctl.engine.tools as tools
import flowctl.store.sql as sql
from flowctl.errors import (Cancelled, FlowFailed, LeaseLost, ReviewTimeout, RunConflict, ToolCrashed, ToolError,
                            error_record, first_line, run_error)


def test_lease_lost_and_tool_crashed_live_in_errors_with_stable_codes():
    assert issubclass(LeaseLost, RunConflict) and LeaseLost.code == "LEASE_LOST"
    assert issubclass(ToolCrashed, ToolError) and ToolCrashed.code == "TOOL_CRASHED"
    assert sql.LeaseLost is LeaseLost and tools.ToolCrashed is ToolCrashed  # the old names still import


def test_run_error_keeps_the_stored_shapes():
    assert run_error(Cancelled, "cancelled by ann", "a") == {
        "type": "Cancelled", "code": "CANCELLED", "message": "cancelled by ann", "state": "a"}
    assert run_error(ReviewTimeout, "review 'r' timed out", "r", 1) == {
        "type": "ReviewTimeout", "code": "REVIEW_TIMEOUT", "message": "review 'r' timed out", "state": "r", "attempt": 1}
    assert run_error("Payments.Declined", "no", "a") == {
        "type": "Payments.Declined", "code": "Payments.Declined", "message": "no", "state": "a"}


def test_error_record_names_a_tool_exception_by_its_class_and_a_flowctl_error_by_its_code():
    assert error_record(KeyError("k"), "a", 2) == {"type": "KeyError", "code": "KeyError", "message": "'k'",
                                                   "state": "a", "attempt": 2}
    assert error_record(ReviewTimeout("late"), "r", 1)["code"] == "REVIEW_TIMEOUT"
    assert error_record(FlowFailed("Aborted", "why"), "f", 1)["code"] == "Aborted"
    assert error_record(ToolError("Lookup.Broken", "x"), "t", 1)["code"] == "Lookup.Broken"


def test_first_line():
    assert first_line(ValueError("one\ntwo")) == "one" and first_line(ValueError()) == "ValueError"
