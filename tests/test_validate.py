"""flowctl.validate: each check code, with its own small project, asserting code, severity and location."""
from __future__ import annotations

import sys

import pytest

from flowctl.diagnostics import CODES
from flowctl.definition.loader import load_project
from flowctl.check.checks import CHECKS, validate
from support.helpers import MINIMAL, Link, of, one, problems, where

FLOW = "orchestration/transitions/flow.yaml"

# begin --> t (task, tool pay@^1) --> done
TASK = {
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\n",
    "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n",
    "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions:\n  - from: t\n    to: done\n",
}


def flow(*transitions, start="begin", extra=""):
    """A flow file: transitions given as 'src>dst' or 'src>dst?when'."""
    lines = ["flow: flow", f"start: {start}", "transitions:"]
    for t in transitions:
        src, rest = t.split(">", 1)
        dst, _, when = rest.partition("?")
        lines.append(f"  - from: {src}")
        if when:
            lines.append(f"    when: {when}")
        lines.append(f"    to: {dst}")
    return "\n".join(lines) + "\n" + extra


def errors(diags):
    return [d for d in diags if d.severity == "error"]


# ------------------------------------------------------------------ a clean project
def test_a_clean_project_has_no_diagnostics(make_project):
    assert problems(make_project(MINIMAL)) == []
    assert problems(make_project(TASK)) == []


def test_validate_returns_sorted_unique_diagnostics(make_project):
    root = make_project({**MINIMAL, "states/z.yaml": "id: z\ntype: succeed\n", "states/a.yaml": "id: a\ntype: succeed\n"})
    diags = problems(root)
    assert diags == sorted(diags, key=lambda d: (d.file, d.line, d.column, d.code))
    assert len(diags) == len(set(diags))
    assert [d.file for d in diags] == ["orchestration/states/a.yaml", "orchestration/states/z.yaml"]


def test_every_check_in_the_table_is_a_function():
    assert all(callable(c) for c in CHECKS)


def test_every_code_has_a_slug_and_a_severity():
    for code, (slug, severity) in CODES.items():
        assert code.startswith("FC") and len(code) == 5
        assert slug and severity in ("error", "warning")


# ------------------------------------------------------------------ references (FC101-FC106)
def test_fc101_unknown_target_state(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.x", "begin>dnoe")})
    d = one(problems(root), "FC101")
    assert (d.severity, *where(d)) == ("error", FLOW, 8, 9)
    assert "'dnoe'" in d.message
    assert d.hint == "did you mean 'done'?"


def test_fc101_unknown_start_state(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done", start="bgin")})
    diags = problems(root)
    d = [x for x in of(diags, "FC101") if "'bgin'" in x.message][0]
    assert where(d) == (FLOW, 2, 8)


def test_fc101_unknown_goto_in_a_state_handler_and_review_timeout(make_project):
    root = make_project({
        **MINIMAL,
        "states/begin.yaml": "id: begin\ntype: review\ndecisions: [ok]\non_timeout: {goto: nowhere}\n"
                             "on_error:\n  - errors: [X]\n    goto: elsewhere\n",
    })
    diags = of(problems(root), "FC101")
    assert sorted((d.line, d.column, d.message) for d in diags) == [
        (4, 20, "unknown state 'nowhere'"), (7, 11, "unknown state 'elsewhere'")]


def test_fc102_unknown_tool_suggests_a_close_contract(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pya@^1\n"})
    diags = problems(root)
    d = one(diags, "FC102")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/t.yaml", 3, 7)
    assert d.message == "no contract 'pya'"
    assert d.hint == "did you mean 'pay'?"


def test_fc102_unknown_notify_and_fallback_tools(make_project):
    root = make_project({
        **TASK,
        "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\non_error:\n  - errors: [ToolTimeout]\n    fallback: cache@^1\n",
    })
    d = one(problems(root), "FC102")
    assert (d.line, d.column, d.message) == (6, 15, "no contract 'cache'")


@pytest.mark.parametrize("ref, chosen", [("pay@^1", "1.4.2"), ("pay@~1.0", "1.0.0"), ("pay@1.0.0", "1.0.0"),
                                         ("pay@latest", "2.0.0"), ("pay", "2.0.0"), ("pay@1", "1.4.2"),
                                         ("pay@^0.3", "0.3.1")])
def test_version_constraints_resolve_to_the_highest_match(make_project, ref, chosen):
    files = {**TASK, "states/t.yaml": f"id: t\ntype: task\ntool: {ref}\n"}
    for v in ("0.3.1", "1.0.0", "1.4.2", "2.0.0"):
        files[f"contracts/pay.v{v}.yaml"] = f"id: pay\nversion: {v}\nentrypoint: m:pay\n"
    root = make_project(files)
    assert errors(problems(root)) == []
    assert load_project(root).resolve_tool(ref).version == chosen


@pytest.mark.parametrize("ref, message", [
    ("pay@^3", "no version of 'pay' satisfies '^3'"),
    ("pay@~1.5", "no version of 'pay' satisfies '~1.5'"),
    ("pay@1.2.3", "no version of 'pay' satisfies '1.2.3'"),
    ("pay@>=1", "'>=1' is not a version constraint (use 1.2.3, ^1, ~1.2 or latest)"),
])
def test_fc102_unsatisfiable_or_malformed_constraint(make_project, ref, message):
    files = {**TASK, "states/t.yaml": f"id: t\ntype: task\ntool: {ref}\n",
             "contracts/pay.v1.4.2.yaml": "id: pay\nversion: 1.4.2\nentrypoint: m:pay\n"}
    d = one(problems(make_project(files)), "FC102")
    assert (d.line, d.column, d.message) == (3, 7, message)
    if "satisfies" in message:
        assert d.hint == "available: 1.0.0, 1.4.2"


def test_fc102_pre_releases_are_only_chosen_by_an_exact_pin(make_project):
    files = {**TASK, "contracts/pay.v1.0.0.yaml": None,
             "contracts/pay.v1.1.0-rc.1.yaml": "id: pay\nversion: 1.1.0-rc.1\nentrypoint: m:pay\n"}
    assert of(problems(make_project(files)), "FC102")  # ^1 does not pick 1.1.0-rc.1
    files["states/t.yaml"] = "id: t\ntype: task\ntool: pay@1.1.0-rc.1\n"
    assert of(problems(make_project(files)), "FC102") == []


def test_fc103_policy_names_an_unknown_tool(make_project):
    root = make_project({**TASK, "policies/p.yaml": "policy: p\napplies_to: [pay, pya]\n"})
    d = one(problems(root), "FC103")
    assert (d.severity, *where(d)) == ("error", "orchestration/policies/p.yaml", 2, 19)
    assert "'pya'" in d.message and d.hint == "did you mean 'pay'?"


def test_fc104_state_no_flow_uses_is_a_warning(make_project):
    root = make_project({**MINIMAL, "states/lonely.yaml": "id: lonely\ntype: succeed\n"})
    d = one(problems(root), "FC104")
    assert (d.severity, *where(d)) == ("warning", "orchestration/states/lonely.yaml", 1, 5)


def test_fc104_a_state_reached_only_through_a_state_handler_is_used(make_project):
    root = make_project({**MINIMAL, "states/oops.yaml": "id: oops\ntype: fail\nerror: Oops\n",
                         "states/begin.yaml": "id: begin\ntype: choice\non_error:\n  - errors: [X]\n    goto: oops\n"})
    assert of(problems(root), "FC104") == []


def test_fc105_contract_no_state_uses_is_a_warning(make_project):
    root = make_project({**TASK, "contracts/other.v2.1.0.yaml": "id: other\nversion: 2.1.0\nentrypoint: m:f\n"})
    d = one(problems(root), "FC105")
    assert (d.severity, *where(d)) == ("warning", "orchestration/contracts/other.v2.1.0.yaml", 1, 5)
    assert "other@^2" in d.hint


def test_fc106_unknown_flow_in_subflow_and_parallel(make_project):
    root = make_project({
        **MINIMAL,
        "states/sub.yaml": "id: sub\ntype: subflow\nflow: chlid\n",
        "states/par.yaml": "id: par\ntype: parallel\nbranches: [flow, nope]\n",
        "transitions/flow.yaml": flow("begin>sub", "sub>par", "par>done"),
    })
    diags = of(problems(root), "FC106")
    assert sorted((d.file, d.line, d.column, d.severity) for d in diags) == [
        ("orchestration/states/par.yaml", 3, 18, "error"),
        ("orchestration/states/sub.yaml", 3, 7, "error"),
    ]


def test_flow_level_handler_cannot_fall_back(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done", extra="on_error:\n  - errors: [X]\n    fallback: pay@^1\n")})
    d = one(problems(root), "FC010")
    assert where(d) == (FLOW, 8, 15)


# ------------------------------------------------------------------ graph (FC201-FC206)
def test_fc201_unreachable_cycle_is_named_at_its_transitions(make_project):
    root = make_project({
        **MINIMAL,
        "states/a.yaml": "id: a\ntype: choice\n",
        "states/b.yaml": "id: b\ntype: choice\n",
        "transitions/flow.yaml": flow("begin>done", "a>b", "b>a"),
    })
    diags = problems(root)
    found = sorted((d.severity, d.line, d.column, d.message) for d in of(diags, "FC201"))
    assert found == [
        ("error", 6, 11, "state 'a' is unreachable from start 'begin' in flow 'flow'"),
        ("error", 7, 9, "state 'b' is unreachable from start 'begin' in flow 'flow'"),
    ]


def test_error_gotos_make_states_reachable(make_project):
    root = make_project({
        **MINIMAL,
        "states/rescue.yaml": "id: rescue\ntype: choice\n",
        "states/begin.yaml": "id: begin\ntype: choice\non_error:\n  - errors: [X]\n    goto: rescue\n",
        "transitions/flow.yaml": flow("begin>done", "rescue>done"),
    })
    assert problems(root) == []


def test_fc202_flow_that_can_never_end(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>begin")})
    d = one(problems(root), "FC202")
    assert (d.severity, *where(d)) == ("error", FLOW, 2, 8)


def test_fc203_trap_a_reachable_cycle_with_no_way_out(make_project):
    root = make_project({
        **MINIMAL,
        "states/a.yaml": "id: a\ntype: choice\n",
        "states/b.yaml": "id: b\ntype: choice\n",
        "transitions/flow.yaml": flow("begin>a?input.x", "begin>done", "a>b", "b>a"),
    })
    diags = problems(root)
    # each state is named where the flow first mentions it: `to: a` (line 6), `to: b` (line 10)
    found = sorted((d.severity, d.line, d.column, d.message[:9]) for d in of(diags, "FC203"))
    assert found == [("error", 6, 9, "state 'a'"), ("error", 10, 9, "state 'b'")]
    assert of(diags, "FC201") == [] and of(diags, "FC202") == []


def test_a_loop_with_a_guarded_exit_is_not_a_trap(make_project):
    root = make_project({
        **MINIMAL,
        "states/a.yaml": "id: a\ntype: choice\n",
        "transitions/flow.yaml": flow("begin>a", "a>done?visits.a > `3`", "a>a"),
    })
    assert problems(root) == []


def test_a_flow_level_catch_all_does_not_hide_a_trap(make_project):
    root = make_project({
        **MINIMAL,
        "states/failed.yaml": "id: failed\ntype: fail\nerror: Failed\n",
        "states/a.yaml": "id: a\ntype: choice\n",
        "transitions/flow.yaml": flow("begin>a?input.x", "begin>done", "a>a",
                                      extra='on_error:\n  - errors: ["*"]\n    goto: failed\n'),
    })
    assert [d.message for d in of(problems(root), "FC203")] == [
        "state 'a' cannot reach a succeed or fail state in flow 'flow' (a trap)"]


def test_a_state_file_that_does_not_load_is_the_only_error_not_a_trap_before_it(make_project):
    # begin -> a -> b -> done (or begin -> failed), and done.yaml does not parse: `a` is no trap.
    root = make_project({
        "states/begin.yaml": "id: begin\ntype: choice\n",
        "states/a.yaml": "id: a\ntype: choice\n",
        "states/b.yaml": "id: b\ntype: choice\n",
        "states/failed.yaml": "id: failed\ntype: fail\nerror: Failed\n",
        "states/done.yaml": "id: done\ntype: succeed\n  bad: [\n",
        "transitions/flow.yaml": flow("begin>a?input.x", "begin>failed", "a>b", "b>done"),
    })
    assert [d.code for d in errors(problems(root))] == ["FC001"]


def test_a_policy_file_that_does_not_load_is_the_only_error_not_an_ungated_tool(make_project):
    root = make_project({
        **TASK,
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: m:u\n"
                                     "side_effects:\n  - {type: database_write, target: t}\n",
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow: [\n",
    })
    diags = problems(root)
    assert [d.code for d in errors(diags)] == ["FC001"] and of(diags, "FC702") == []


def test_fc204_terminal_state_with_a_transition(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done", "done>begin")})
    d = one(problems(root), "FC204")
    assert (d.severity, *where(d)) == ("error", FLOW, 6, 11)
    assert "'done' is a succeed state" in d.message


def test_fc205_non_terminal_state_without_exit(make_project):
    root = make_project({
        **MINIMAL,
        "states/a.yaml": "id: a\ntype: choice\n",
        "transitions/flow.yaml": flow("begin>a?input.x", "begin>done"),
    })
    d = one(problems(root), "FC205")
    assert (d.severity, *where(d)) == ("error", FLOW, 6, 9)
    assert d.hint == "add a transition from: a"


def test_fc206_no_default_transition_is_a_warning_at_the_last_one(make_project):
    root = make_project({
        **MINIMAL,
        "states/failed.yaml": "id: failed\ntype: fail\nerror: Nope\n",
        "transitions/flow.yaml": flow("begin>done?input.ok", "begin>failed?input.bad"),
    })
    d = one(problems(root), "FC206")
    assert (d.severity, *where(d)) == ("warning", FLOW, 7, 5)
    assert "NoTransitionMatched" in d.message


# ------------------------------------------------------------------ order (FC301-FC303)
def test_fc301_catch_all_not_last_in_flow_handlers(make_project):
    root = make_project({
        **MINIMAL,
        "states/failed.yaml": "id: failed\ntype: fail\nerror: X\n",
        "transitions/flow.yaml": flow("begin>done", extra='on_error:\n  - errors: ["*"]\n    goto: failed\n'
                                                            "  - errors: [ToolTimeout]\n    goto: done\n"),
    })
    d = one(problems(root), "FC301")
    assert (d.severity, *where(d)) == ("error", FLOW, 7, 13)
    assert "1 rule(s) after it" in d.message


def test_fc301_catch_all_not_last_in_state_retry(make_project):
    root = make_project({**TASK, "states/t.yaml": 'id: t\ntype: task\ntool: pay@^1\nretry:\n  - errors: ["*"]\n'
                                                  "  - errors: [ToolTimeout]\n"})
    d = one(problems(root), "FC301")
    assert (d.file, d.line, d.column) == ("orchestration/states/t.yaml", 5, 13)


def test_fc302_transition_after_the_default(make_project):
    root = make_project({
        **MINIMAL,
        "states/a.yaml": "id: a\ntype: succeed\n",
        "transitions/flow.yaml": flow("begin>done", "begin>a?input.x"),
    })
    d = one(problems(root), "FC302")
    assert (d.severity, *where(d)) == ("error", FLOW, 6, 5)
    assert "line 4" in d.message


def test_fc303_error_already_matched_by_an_earlier_handler(make_project):
    root = make_project({
        **TASK,
        "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\non_error:\n  - errors: [ToolTimeout]\n    goto: done\n"
                         "  - errors: [SchemaMismatch, ToolTimeout]\n    goto: done\n",
    })
    d = one(problems(root), "FC303")
    assert (d.severity, *where(d)) == ("warning", "orchestration/states/t.yaml", 7, 13)
    assert "'ToolTimeout'" in d.message


def test_fc304_an_error_name_a_letter_from_a_flowctl_errors_is_named(make_project):
    """(new-user finding: `errors: [ToolUnavailble]` validated clean, and the retry never applied)"""
    root = make_project({
        **TASK,
        "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\nretry:\n  - errors: [ToolUnavailble, Payments.Declined]\n"
                         "on_error:\n  - errors: [ValueError, ToolTimeout]\n    goto: done\n",
    })
    d = one(problems(root), "FC304")  # not the tool's own dotted name, a Python exception or a real one
    assert (d.severity, *where(d)) == ("warning", "orchestration/states/t.yaml", 5, 13)
    assert "'ToolUnavailble'" in d.message and d.hint == "did you mean 'ToolUnavailable'?"


# ------------------------------------------------------------------ expressions (FC401-FC404)
def test_fc401_column_points_inside_the_expression(make_project):
    # `when: 'input.x = 1'` -- the value starts at column 11 (the quote), `=` is at offset 8
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done?'input.x = `1`'", "begin>done")})
    d = one(problems(root), "FC401")
    assert (d.severity, *where(d)) == ("error", FLOW, 5, 20)
    assert "'='" in d.message


def test_fc401_in_a_plain_scalar(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.a ! b", "begin>done")})
    d = one(problems(root), "FC401")
    assert (d.line, d.column) == (5, 19)


def test_fc401_incomplete_expression_in_a_state_input(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\ninput:\n  order: \"input.[x\"\n"})
    d = one(problems(root), "FC401")
    assert where(d) == ("orchestration/states/t.yaml", 5, 19)
    assert "ends too early" in d.message


def test_fc402_double_quoted_literal_is_a_field_name(make_project):
    # a name the scope has: a field read, if most likely not what was meant (a warning)
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("""begin>done?'response.status == "input"'""", "begin>done")})
    d = one(problems(root), "FC402")
    assert (d.severity, *where(d)) == ("warning", FLOW, 5, 31)
    assert d.hint == "write the string as 'input' (single quotes)"


def test_a_double_quoted_literal_no_scope_has_is_an_error_it_is_always_null(make_project):
    """(new-user finding: review.decision == "approve" was a warning, so every approval took the
    reject branch of a flow that validated)"""
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("""begin>done?'response.status == "ok"'""", "begin>done")})
    d = one(problems(root), "FC406")
    assert (d.severity, *where(d)) == ("error", FLOW, 5, 31)
    assert "always null" in d.message and d.hint == "write the string as 'ok' (single quotes)"


def test_fc403_bare_backtick_literal(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.x == `ok`", "begin>done")})
    d = one(problems(root), "FC403")
    assert (d.severity, *where(d)) == ("warning", FLOW, 5, 22)


def test_json_backtick_literals_are_fine(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.n > `3` && input.ok == `true`",
                                                                  "begin>done")})
    assert problems(root) == []


def test_fc404_unknown_function_in_a_transition_set(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml":
                         "flow: flow\nstart: begin\ntransitions:\n  - from: begin\n    to: done\n    set:\n"
                         "      when_: \"upper(input.name)\"\n"})
    d = one(problems(root), "FC404")
    assert (d.severity, *where(d)) == ("error", FLOW, 7, 15)
    assert "upper()" in d.message


def test_flowctl_extra_functions_are_known(make_project):
    root = make_project({**MINIMAL, "transitions/flow.yaml":
                         "flow: flow\nstart: begin\ntransitions:\n  - from: begin\n    to: done\n    set:\n"
                         "      a: uuid()\n      b: now()\n      c: \"add(`1`, `2`)\"\n      d: \"has(input, 'x')\"\n"
                         "      e: \"date_add(now(), '1h')\"\n      f: \"glob(input.name, 'a*')\"\n"})
    assert problems(root) == []


def test_expressions_in_contracts_and_policies_are_checked(make_project):
    root = make_project({
        **TASK,
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nidempotency_key: \"join('-', [input.a\"\n",
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nreview_when: \"nope(input.n)\"\n",
    })
    diags = problems(root)
    assert [(d.code, d.file) for d in errors(diags)] == [
        ("FC401", "orchestration/contracts/pay.v1.0.0.yaml"), ("FC404", "orchestration/policies/p.yaml")]


# ------------------------------------------------------------------ timing (FC501) and wait states
def test_fc501_max_delay_shorter_than_interval(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\nretry:\n  - errors: [ToolTimeout]\n"
                                                  "    interval: 10s\n    max_delay: 2s\n"})
    d = one(problems(root), "FC501")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/t.yaml", 7, 16)


def test_backoff_below_one_is_refused_by_the_schema(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\nretry:\n  - errors: [A]\n    backoff: 0.5\n"})
    d = one(problems(root), "FC010")
    assert (d.line, d.column) == (6, 14)


@pytest.mark.parametrize("body", ["", "duration: 5m\nuntil: input.at\n"])
def test_wait_state_needs_exactly_one_of_duration_or_until(make_project, body):
    root = make_project({**MINIMAL, "states/begin.yaml": "id: begin\ntype: wait\n" + body})
    d = one(problems(root), "FC010")
    assert where(d) == ("orchestration/states/begin.yaml", 2, 7)


# ------------------------------------------------------------------ contracts (FC601-FC604)
EFFECT = "side_effects:\n  - {type: database_write, target: payments}\n"


def test_fc601_side_effects_without_verify_and_compensate(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n" + EFFECT})
    diags = of(problems(root), "FC601")
    assert sorted((d.severity, d.line, d.column, d.message) for d in diags) == [
        ("error", 5, 3, "'pay@1.0.0' declares side effects but no compensate"),
        ("error", 5, 3, "'pay@1.0.0' declares side effects but no verify"),
    ]


def test_fc601_compensate_none_needs_a_reason(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: none\n" + EFFECT})
    d = one(problems(root), "FC601")
    assert (d.severity, d.line, d.column) == ("error", 5, 13)
    assert "reason" in d.message
    # the hint names the contract's top-level field with a line to copy
    assert "top-level `reason` field" in d.hint and "`reason: mails cannot be unsent`" in d.hint


def test_fc601_no_verify_with_nothing_to_undo_is_a_warning(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\ncompensate: none\nreason: a log line\n" + EFFECT})
    d = one(problems(root), "FC601")
    assert (d.severity, d.line, d.column) == ("warning", 7, 3)


def test_a_complete_side_effecting_contract_is_clean(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: m:undo\n" + EFFECT,
                         "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow: []\n"})
    assert problems(root) == []


def test_fc702_a_side_effecting_tool_no_policy_allows_is_flagged_at_the_state(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: m:undo\n" + EFFECT})
    d = one(problems(root), "FC702")
    assert (d.severity, where(d)) == ("warning", ("orchestration/states/t.yaml", 3, 7))
    assert "applies_to: [pay]" in d.hint


def test_fc605_input_mapping_against_the_contract_input_schema(make_project):
    contract = ("id: pay\nversion: 1.0.0\nentrypoint: m:pay\ninput_schema:\n  type: object\n"
                "  required: [subject]\n  additionalProperties: false\n  properties:\n    subject: {type: string}\n")
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml": contract,
                         "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\ninput:\n  subjct: input.s\n"})
    diags = sorted(of(problems(root), "FC605"), key=lambda d: d.line)
    assert [(d.line, d.column) for d in diags] == [(4, 1), (5, 3)]
    assert "never sets 'subject'" in diags[0].message and diags[0].hint == "did you mean 'subjct'?"
    assert "no input field 'subjct'" in diags[1].message and diags[1].hint == "did you mean 'subject'?"


def test_fc405_fail_cause_that_looks_like_an_expression(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: fail\nerror: E\ncause: \"'no'\"\n",
                         "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions: []\n"})
    d = one(problems(root), "FC405")
    assert (d.severity, d.line) == ("warning", 4)


def test_fc609_embedded_schemas_that_cannot_work(make_project):
    schema = ("input_schema:\n  type: object\n  properties:\n    a: {type: strin}\n    b: {type: string, pattern: '(('}\n"
              "    c: {$ref: '#/$defs/nope'}\n    d: {$ref: 'http://example.com/s.json'}\n")
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n" + schema})
    diags = sorted(of(problems(root), "FC609"), key=lambda d: d.line)
    assert [d.line for d in diags] == [7, 8, 9, 10]
    assert "did you mean 'string'" in diags[0].message and "does not compile" in diags[1].message
    assert "does not resolve" in diags[2].message and "not a local reference" in diags[3].message


@pytest.mark.parametrize("prop, code, line, says", [
    ("{type: strin}", "FC010", 7, "'strin' is not allowed"),  # the metaschema, as for any embedded schema
    ("{type: string, pattern: '(('}", "FC609", 7, "does not compile"),
])
def test_a_review_data_schema_is_checked_as_a_json_schema(make_project, prop, code, line, says):
    ask = f"id: ask\ntype: review\ndecisions: [approve]\ndata_schema:\n  type: object\n  properties:\n    a: {prop}\n"
    root = make_project({**TASK, "states/ask.yaml": ask,
                         "transitions/flow.yaml": "flow: flow\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n"})
    d = one(problems(root), code)
    assert d.file.endswith("ask.yaml") and d.line == line and says in d.message


def test_a_handler_with_two_actions_and_impossible_times(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\ntimeout: 0s\n"
                                                  "retry: [{errors: ['*'], interval: 400d}]\n"
                                                  "on_error:\n  - {errors: ['*'], goto: done, fail: Boom}\n"})
    diags = problems(root)
    assert "one action" in one(diags, "FC010").message
    assert "longer than 0" in one(diags, "FC502").message
    assert one(diags, "FC501").line == 5


def test_fc107_a_flow_calling_itself_without_a_depth_limit(make_project):
    root = make_project({**TASK, "states/t.yaml": "id: t\ntype: subflow\nflow: flow\n"})
    d = one(problems(root), "FC107")
    assert (d.severity, d.line, d.column) == ("error", 2, 7)
    limited = make_project({**TASK, "states/t.yaml": "id: t\ntype: subflow\nflow: flow\nmax_depth: 3\n"})
    assert of(problems(limited), "FC107") == []


def test_fc108_child_input_misses_a_required_field(make_project):
    root = make_project({**TASK,
                         "states/t.yaml": "id: t\ntype: subflow\nflow: kid\ninput: {b: input.b}\n",
                         "states/k.yaml": "id: k\ntype: succeed\n",
                         "transitions/kid.yaml": "flow: kid\nstart: k\ninput_schema: {type: object, required: [a]}\ntransitions: []\n"})
    d = one(problems(root), "FC108")
    assert (d.severity, d.line, d.column) == ("error", 4, 1) and "requires input 'a'" in d.message


def test_fc602_read_only_contract_with_compensate(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\ncompensate: m:undo\ncompensate_on_failure: true\n"})
    diags = of(problems(root), "FC602")
    assert sorted((d.severity, d.line, d.column) for d in diags) == [("error", 4, 13), ("error", 5, 24)]


TOOLS_MODULE = "fc603_tools_{}"  # a module name per test: import_check imports for real


def test_fc603_import_check_reports_a_missing_module_and_function_at_the_contract_line(make_project, request):
    mod = TOOLS_MODULE.format(request.node.name.replace("[", "_").replace("]", "_").replace("-", "_"))
    root = make_project({
        **TASK,
        f"tools/{mod}.py": "def pay(input, call):\n    return {}\nverify = 3\n",
        "contracts/pay.v1.0.0.yaml": f"id: pay\nversion: 1.0.0\nentrypoint: {mod}:pay\nverify: {mod}:verify\n"
                                     f"compensate: no_such_module_zz:undo\n" + EFFECT
                                     + f"examples: []\n",
    })
    path_before = list(sys.path)
    diags = of(problems(root, import_check=True), "FC603")
    assert sys.path == path_before
    found = sorted((d.severity, d.line, d.column, d.message.split(":")[0]) for d in diags)
    assert found == [("error", 4, 9, f"verify {mod}"), ("error", 5, 13, "compensate no_such_module_zz")]
    by_line = {d.line: d for d in diags}
    assert "'verify' is not callable" in by_line[4].message
    assert "cannot import module 'no_such_module_zz'" in by_line[5].message
    # without --import-check nothing is imported
    assert of(problems(root), "FC603") == []


def test_fc603_missing_function_in_an_existing_module(make_project, request):
    mod = TOOLS_MODULE.format("missing_fn")
    root = make_project({
        **TASK,
        f"tools/{mod}.py": "def charge(input, call):\n    return {}\n",
        "contracts/pay.v1.0.0.yaml": f"id: pay\nversion: 1.0.0\nentrypoint: {mod}:pay\n",
    })
    d = one(problems(root, import_check=True), "FC603")
    assert (d.severity, *where(d)) == ("error", "orchestration/contracts/pay.v1.0.0.yaml", 3, 13)
    assert f"module '{mod}' has no 'pay'" in d.message


def test_fc603_a_tool_module_that_raises_on_import(make_project):
    mod = TOOLS_MODULE.format("raises")
    root = make_project({
        **TASK,
        f"tools/{mod}.py": "raise RuntimeError('no config')\n",
        "contracts/pay.v1.0.0.yaml": f"id: pay\nversion: 1.0.0\nentrypoint: {mod}:pay\n",
    })
    d = one(problems(root, import_check=True), "FC603")
    assert "RuntimeError: no config" in d.message


# ------------------------------------------------------------------ policies (FC701)
def test_fc701_bad_regex_and_empty_range(make_project):
    root = make_project({**TASK, "policies/p.yaml": 'policy: p\napplies_to: [pay]\nallow:\n  - {field: input.to, regex: "([a-z"}\n'
                                                   "  - {field: input.n, range: [10, 1]}\n"})
    diags = of(problems(root), "FC701")
    assert sorted((d.severity, d.line, d.column) for d in diags) == [("error", 4, 30), ("error", 5, 29)]


# ------------------------------------------------------------------ never raises
def test_validate_accepts_a_project_of_broken_files(make_project):
    root = make_project({
        "states/a.yaml": b"\xff\xfe junk",
        "states/b.yaml": "[",
        "transitions/flow.yaml": "flow: flow\nstart: a\ntransitions: 7\n",
        "contracts/c.v1.0.0.yaml": "- 1\n",
        "policies/p.yaml": "policy: p\napplies_to: [c]\nallow:\n  - {field: input.x, in: [1], equals: 2}\n",
    })
    diags = validate(load_project(root))
    assert {d.file for d in errors(diags)} == {
        "orchestration/states/a.yaml", "orchestration/states/b.yaml", "orchestration/transitions/flow.yaml",
        "orchestration/contracts/c.v1.0.0.yaml", "orchestration/policies/p.yaml"}


# ------------------------------------------------------------------ every published code can be produced
_EFFECTS = "side_effects:\n  - {type: database_write, target: payments}\n"
CATALOGUE = {
    "FC001": {**MINIMAL, "states/done.yaml": "id: done\ntype: [succeed\n"},
    "FC002": {**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ntype: succeed\n"},
    "FC003": {**MINIMAL, "states/done.yaml": "a: &a [1, *a]\n"},
    "FC008": {**MINIMAL, "states/leak.yaml": Link("/etc/hostname")},
    "FC004": {**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescription: x\n", "states/no.yaml": "id: no\ntype: succeed\n",
              "transitions/flow.yaml": flow("begin>no?input.x", "begin>done")},
    "FC005": {**MINIMAL, "states/done.yaml": "id: finished\ntype: succeed\n"},
    "FC006": {**MINIMAL, "states/done.json": '{"id": "done", "type": "succeed"}'},
    "FC007": {**MINIMAL, "states/done.yaml": "id: !x done\ntype: succeed\n"},
    "FC010": {**MINIMAL, "states/done.yaml": "id: done\n"},
    "FC011": {**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\nextra: 1\n"},
    "FC012": {**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ntool: x\n"},
    "FC101": {**MINIMAL, "transitions/flow.yaml": flow("begin>gone")},
    "FC102": {**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^2\n"},
    "FC103": {**TASK, "policies/p.yaml": "policy: p\napplies_to: [nope]\n"},
    "FC104": {**MINIMAL, "states/z.yaml": "id: z\ntype: succeed\n"},
    "FC105": {**TASK, "contracts/z.v1.0.0.yaml": "id: z\nversion: 1.0.0\nentrypoint: m:z\n"},
    "FC106": {**MINIMAL, "states/begin.yaml": "id: begin\ntype: subflow\nflow: nope\n"},
    "FC201": {**MINIMAL, "states/z.yaml": "id: z\ntype: choice\n", "transitions/flow.yaml": flow("begin>done", "z>done")},
    "FC202": {**MINIMAL, "transitions/flow.yaml": flow("begin>begin")},
    "FC203": {**MINIMAL, "states/z.yaml": "id: z\ntype: choice\n", "transitions/flow.yaml": flow("begin>z?input.x", "begin>done", "z>z")},
    "FC204": {**MINIMAL, "transitions/flow.yaml": flow("begin>done", "done>begin")},
    "FC205": {**MINIMAL, "states/z.yaml": "id: z\ntype: choice\n", "transitions/flow.yaml": flow("begin>z?input.x", "begin>done")},
    "FC206": {**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.x")},
    "FC301": {**MINIMAL, "transitions/flow.yaml": flow("begin>done", extra='on_error:\n  - errors: ["*"]\n    goto: done\n'
                                                                            "  - errors: [X]\n    goto: done\n")},
    "FC302": {**MINIMAL, "transitions/flow.yaml": flow("begin>done", "begin>done?input.x")},
    "FC303": {**MINIMAL, "transitions/flow.yaml": flow("begin>done", extra="on_error:\n  - errors: [X]\n    goto: done\n"
                                                                            "  - errors: [X]\n    goto: done\n")},
    "FC304": {**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\nretry:\n  - {errors: [ToolTimout]}\n"},
    "FC401": {**MINIMAL, "transitions/flow.yaml": flow("begin>done?input.[", "begin>done")},
    "FC402": {**MINIMAL, "transitions/flow.yaml": flow("""begin>done?'a == "input"'""", "begin>done")},
    "FC403": {**MINIMAL, "transitions/flow.yaml": flow("begin>done?a == `b`", "begin>done")},
    "FC404": {**MINIMAL, "transitions/flow.yaml": flow("begin>done?nope(a)", "begin>done")},
    "FC406": {**MINIMAL, "transitions/flow.yaml": flow("begin>done?respons.ok", "begin>done")},
    "FC501": {**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\nretry:\n  - {errors: [X], interval: 5s, max_delay: 1s}\n"},
    "FC502": {**TASK, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\ntimeout: 5\n"},
    "FC601": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n" + _EFFECTS},
    "FC602": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\ncompensate: m:u\n"},
    "FC603": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: catalogue_no_such_mod:pay\n"},
    "FC604": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.1\nentrypoint: m:pay\n"},
    "FC701": {**TASK, "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow:\n  - {field: input.n, range: [2, 1]}\n"},
    "FC702": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\n"
                                                   "compensate: m:u\nside_effects: [{type: db, target: t}]\n"},
    "FC703": {**TASK, "policies/p.yaml": "policy: p\napplies_to: [pay]\n"},
    "FC605": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n"
                                                   "input_schema: {type: object, required: [a]}\n",
              "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\ninput: {b: input.b}\n"},
    "FC405": {**TASK, "states/t.yaml": "id: t\ntype: fail\nerror: \"'E'\"\n",
              "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions: []\n"},
    "FC107": {**TASK, "states/t.yaml": "id: t\ntype: subflow\nflow: flow\n"},
    "FC609": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\noutput_schema: {type: strin}\n"},
    "FC606": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: os:system\n"},
    "FC608": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pya\n",
              "tools/m.py": "def pay(input, call):\n    return {}\n"},
    "FC806": {"states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
              "states/done.yaml": "id: done\ntype: succeed\n",
              "transitions/flow.yaml": "flow: flow\nstart: ask\ntransitions:\n"
                                       "  - {from: ask, to: done, when: \"review.decision != 'rejected'\"}\n"
                                       "  - {from: ask, to: done}\n"},
    "FC610": {**TASK, "states/t.yaml": "id: t\ntype: review\ndecisions: [ok]\nnotify: pay@^1\nshow: {card: input.card}\n",
              "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nsensitive: [card]\n"},
    "FC607": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nsensitive: [custmer]\n"
              "input_schema: {type: object, properties: {customer: {type: string}}}\n"},
    "FC704": {**TASK, "contracts/peek.v1.0.0.yaml": "id: peek\nversion: 1.0.0\nentrypoint: m:pay\n" + _EFFECTS
              + "verify: m:v\ncompensate: none\nreason: test\n"},
    "FC705": {**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n" + _EFFECTS
              + "verify: m:pay\ncompensate: m:undo\n"},
    "FC108": {**TASK, "states/t.yaml": "id: t\ntype: subflow\nflow: kid\ninput: {b: input.b}\n",
              "states/k.yaml": "id: k\ntype: succeed\n",
              "transitions/kid.yaml": "flow: kid\nstart: k\ninput_schema: {required: [a]}\ntransitions: []\n"},
}
CATALOGUE.update(__import__("test_dataflow").CATALOGUE)  # the data-flow codes (FC407, FC408, FC8xx)
CATALOGUE.update(__import__("test_model_checks").CATALOGUE)  # the model-state codes (FC9xx)


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_published_code_has_an_example_that_produces_it(make_project, code):
    assert code in CATALOGUE, f"{code} is published in diagnostics.CODES but nothing here produces it"
    diags = problems(make_project(CATALOGUE[code]), import_check=code == "FC603")
    found = of(diags, code)
    assert found, [(d.code, d.location) for d in diags]
    assert all(d.severity == CODES[code][1] for d in found)
    assert all(d.file.startswith("orchestration/") and d.line >= 1 and d.column >= 1 for d in found)


def test_import_check_finds_a_tool_that_cannot_be_called_as_the_engine_calls_it(make_project):
    root = make_project({**TASK, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: sigcheck_tk:pay\n",
                         "tools/sigcheck_tk.py": "def pay(input):\n    return {}\n"})
    found = of(problems(root, import_check=True), "FC603")
    assert found and "'pay(input)' cannot take the 2 positional arguments flowctl calls it with, pay(input, call)" in \
        found[0].message, found[0].message  # (new-user finding: it said only Python's "too many positional arguments")


def test_fc607_a_sensitive_name_no_schema_declares_is_a_typo_warning_with_the_real_field(make_project):
    # `custmer` redacts nothing: the customer's address would be stored in plaintext
    diags = problems(make_project({**TASK, "contracts/pay.v1.0.0.yaml": (
        "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nsensitive: [custmer, card.number]\n"
        "input_schema: {type: object, properties: {customer: {type: string}, card: {properties: {number: {}}}}}\n")}))
    found = one(diags, "FC607")
    assert found.severity == "warning" and "custmer" in found.message and "customer" in found.hint
    assert (found.line, found.column) == (4, 13)  # at `custmer` in `sensitive: [custmer, …]`
    # a contract whose schemas declare no properties gives nothing to compare with: silent
    assert not of(problems(make_project({**TASK, "contracts/pay.v1.0.0.yaml":
                                         "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nsensitive: [anything]\n"})), "FC607")


REVIEWED = {
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/no.yaml": "id: no\ntype: fail\nerror: Rejected\n",
}


def test_fc806_a_decision_no_review_offers_is_an_error_with_the_one_meant(make_project):
    # `'approved'` never equals a decision of [approve, reject]: every approval would be read as a rejection
    flow = ("flow: flow\nstart: ask\ntransitions:\n"
            "  - {from: ask, to: done, when: \"review.decision == 'approved'\"}\n  - {from: ask, to: no}\n")
    found = one(problems(make_project({**REVIEWED, "transitions/flow.yaml": flow})), "FC806")
    assert "'approved'" in found.message and "approve, reject" in found.message and "approve" in found.hint
    assert (found.file, found.line) == ("orchestration/transitions/flow.yaml", 4)
    ok = flow.replace("'approved'", "'approve'")
    assert not of(problems(make_project({**REVIEWED, "transitions/flow.yaml": ok})), "FC806")


# ------------------------------------------------------------------ FC406's hint offers only names in scope there
def _fc406_hint(make_project, files):
    return one(problems(make_project(files)), "FC406").hint


def test_fc406_does_not_suggest_item_outside_a_maps_child_flow(make_project):
    hint = _fc406_hint(make_project, {**MINIMAL, "transitions/flow.yaml": flow("begin>done?'iten.ok'", "begin>done")})
    assert "item" not in hint and "input" in hint


def test_fc406_suggests_item_in_the_flow_a_map_runs(make_project):
    files = {**MINIMAL, "states/each.yaml": "id: each\ntype: map\nflow: one\nitems: input.items\n",
             "states/step.yaml": "id: step\ntype: choice\n",
             "transitions/flow.yaml": flow("begin>each", "each>done"),
             "transitions/one.yaml": "flow: one\nstart: step\ntransitions:\n"
                                     "  - {from: step, when: 'iten.ok', to: done}\n  - {from: step, to: done}\n"}
    assert _fc406_hint(make_project, files) == "did you mean 'item'?"


def test_fc406_a_bare_word_compared_with_eq_is_told_to_quote_it(make_project):
    hint = _fc406_hint(make_project, {**MINIMAL, "transitions/flow.yaml": flow("begin>done?'input.plan == team'",
                                                                              "begin>done")})
    assert "'team' (in single quotes)" in hint and "item" not in hint


@pytest.mark.parametrize("expr", ["contains(input.tags, urgent)", "starts_with(input.plan, team)",
                                  "contains([team, ''gold''], input.plan)"])
def test_fc406_a_bare_word_searched_for_or_listed_is_told_to_quote_it(make_project, expr):
    """(new-user finding: only a bare word beside == was told to quote it)"""
    hint = _fc406_hint(make_project, {**MINIMAL, "transitions/flow.yaml": flow(f"begin>done?'{expr}'", "begin>done")})
    assert "'team' (in single quotes) for the string" in hint or "'urgent' (in single quotes) for the string" in hint, hint
