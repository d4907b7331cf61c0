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


def test_a_declared_name_of_a_flowctl_step_error_gets_that_errors_code():
    # a fail state re-raising `error.type` stores the stable code, as the engine's own error does
    assert run_error("ExpressionError", "bad", "a")["code"] == "EXPRESSION_ERROR"
    assert run_error("ToolUnavailable", "down", "a")["code"] == "TOOL_UNAVAILABLE"
    assert run_error("ExpressionError", "bad", "a")["type"] == "ExpressionError"
    # tool errors and declared failures keep their own names, as error_record gives them
    assert run_error("ToolError", "x", "a")["code"] == "ToolError"
    assert run_error("FlowFailed", "x", "a")["code"] == "FlowFailed"


def test_a_run_stored_with_the_type_name_as_code_is_read_as_stored():
    from flowctl.engine.result import result_from_row

    old = {"type": "ExpressionError", "code": "ExpressionError", "message": "m", "state": "a"}
    row = {"id": "r1", "flow": "f", "status": "failed", "error": old, "cursor": {"path": ["a"]}}
    assert result_from_row(row).error == old
