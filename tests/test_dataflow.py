"""The static data-flow analysis (issue 15): what is defined where, and what that proves.

Each test names a kind of finding (FC801–FC805) or a guarantee (no false errors on the shipped
examples, the golden-case flows and the shared run cases).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import flowctl
from flowctl.definition.loader import load_project
from flowctl.check import dataflow as flowdata
from support.helpers import REPO, SHARED_CASES, of, one, problems, where

flowdata.RAISE = True  # a failure of the analysis itself fails these tests instead of going silent

REFUND = {
    "contracts/fraud_score.v1.0.0.yaml": """\
        id: fraud_score
        version: 1.0.0
        entrypoint: m:score
        input_schema: {type: object, required: [order_id], properties: {order_id: {type: string}}}
        output_schema:
          type: object
          required: [score]
          additionalProperties: false
          properties:
            score: {type: number}
            flagged: {type: boolean}
        """,
    "contracts/refund.v1.0.0.yaml": """\
        id: refund
        version: 1.0.0
        entrypoint: m:refund
        input_schema:
          type: object
          required: [order_id, amount]
          properties:
            order_id: {type: string}
            amount: {type: number}
        """,
    "states/score.yaml": "id: score\ntype: task\ntool: fraud_score@^1\ninput: {order_id: input.order_id}\n",
    "states/decide.yaml": "id: decide\ntype: choice\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/pay.yaml": "id: pay\ntype: task\ntool: refund@^1\ninput: {order_id: input.order_id, amount: context.amount}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/stop.yaml": "id: stop\ntype: fail\nerror: Rejected\n",
}


def flow(transitions: str, input_schema: str = "{type: object, required: [order_id], properties: {order_id: {type: string}, "
                                               "amount: {type: number}}}") -> dict:
    return {"transitions/refunds.yaml": f"flow: refunds\nversion: 1\nstart: score\ninput_schema: {input_schema}\n"
                                        f"transitions:\n{transitions}"}


BASE = """\
  - from: score
    to: decide
    set: {fraud: response, amount: input.amount}
"""


#: after a decide -> ask transition: the rest of the refunds flow
TAIL = """\
  - {from: decide, to: pay}
  - {from: ask, to: stop}
  - {from: pay, to: done}
"""


def run_checks(make_project, transitions, extra=None):
    root = make_project({**REFUND, **flow(transitions), **(extra or {})})
    return problems(root)


# ------------------------------------------------------------------ FC801: a path no path defines
def test_undefined_field_a_context_typo_is_an_error_with_the_name_it_meant(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "context.frad.score > `0.8`"
    to: ask
  - from: decide
    to: pay
  - {from: ask, to: stop}
  - {from: pay, to: done}
""")
    d = one(diags, "FC801")
    assert "context.frad" in d.message and "'decide'" in d.message
    assert "did you mean 'fraud'" in d.hint
    assert where(d) == ("orchestration/transitions/refunds.yaml", 10, 20)


def test_undefined_field_in_a_contracts_idempotency_key_is_found_where_a_task_calls_it(make_project):
    """The key expression reads the tool input as the calling state builds it and the run's input:
    a typo in either is found in the contract file, before a run fails on it after the gate."""
    keyed = REFUND["contracts/refund.v1.0.0.yaml"] + "idempotency_key: \"join(':', [input.order_id, context.amuont])\"\n"
    closed = ("{type: object, additionalProperties: false, required: [order_id], properties: {order_id: {type: string},"
              " amount: {type: number}}}")
    root = make_project({**REFUND, "contracts/refund.v1.0.0.yaml": keyed, **flow(BASE + TAIL, input_schema=closed)})
    d = one(problems(root), "FC801")
    assert "context.amuont" in d.message and "did you mean 'amount'" in d.hint
    assert d.file == "orchestration/contracts/refund.v1.0.0.yaml"
    run_keyed = REFUND["contracts/refund.v1.0.0.yaml"] + "idempotency_key: \"join(':', [run_input.order, input.order_id])\"\n"
    root = make_project({**REFUND, "contracts/refund.v1.0.0.yaml": run_keyed, **flow(BASE + TAIL, input_schema=closed)})
    d = one(problems(root), "FC801")
    assert "run_input" in d.message and "order" in d.message and "did you mean 'order_id'" in d.hint
    fine = REFUND["contracts/refund.v1.0.0.yaml"] + "idempotency_key: \"join(':', [run_input.order_id, input.order_id])\"\n"
    root = make_project({**REFUND, "contracts/refund.v1.0.0.yaml": fine, **flow(BASE + TAIL, input_schema=closed)})
    assert [x for x in problems(root) if x.code.startswith("FC8")] == []


def _after_review(make_project, when, extra=None):
    """The diagnostics of the refund flow going decide -> ask -> pay when ``when`` holds, else stop."""
    return run_checks(make_project, BASE + f"""\
  - {{from: decide, to: ask}}
  - from: ask
    when: "{when}"
    to: pay
  - {{from: ask, to: stop}}
  - {{from: pay, to: done}}
""", extra)


def test_undefined_field_a_review_typo_is_an_error(make_project):
    diags = _after_review(make_project, "review.decison == 'approve'")
    d = one(diags, "FC801")
    assert "review.decison" in d.message and "did you mean 'decision'" in d.hint


def test_undefined_field_a_property_a_closed_output_schema_lacks(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "context.fraud.scor > `0.8`"
    to: ask
""" + TAIL)
    d = one(diags, "FC801")
    assert "context.fraud.scor" in d.message and "did you mean 'score'" in d.hint


def test_undefined_field_error_read_where_no_error_is_caught(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "error.type == 'ToolTimeout'"
    to: ask
""" + TAIL)
    assert "no error is caught" in one(diags, "FC801").message


def test_open_schemas_and_free_form_data_say_nothing(make_project):
    diags = _after_review(make_project, "review.data.anything == 'x' && input.whatever == 'y'")
    assert of(diags, "FC801") == [] and of(diags, "FC802") == []


ASK_WITH_DATA = ("id: ask\ntype: review\ndecisions: [approve, reject]\ndata_schema:\n  type: object\n"
                 "  additionalProperties: false\n  properties:\n    note: {type: string}\n"
                 "    amount: {type: number}\n")


def test_a_review_data_schema_types_review_data_for_later_states(make_project):
    diags = _after_review(make_project, "review.data.nte == 'x' || review.data.amount > '5'",
                          {"states/ask.yaml": ASK_WITH_DATA})
    d = one(diags, "FC801")
    assert "`review.data` has no field 'nte'" in d.message and d.hint == "did you mean 'note'?"
    assert "number" in one(diags, "FC802").message


# ------------------------------------------------------------------ FC802: different JSON types
def test_type_mismatch_comparison_number_against_string(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "context.fraud.score > '0.8'"
    to: ask
""" + TAIL)
    d = one(diags, "FC802")
    assert "number" in d.message and "string" in d.message and "`0.8`" in d.hint


def test_type_mismatch_comparison_boolean_against_the_string_true(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "context.fraud.flagged == 'true'"
    to: ask
""" + TAIL)
    assert "boolean" in one(diags, "FC802").message


def test_same_types_and_unknown_types_compare_quietly(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "context.fraud.score > `0.8` && context.fraud.flagged == `true`"
    to: ask
  - {from: decide, to: pay}
  - {from: ask, when: "review.data.x == '1' && review.by == 'ann'", to: pay}
  - {from: ask, to: stop}
  - {from: pay, to: done}
""")
    assert [d for d in diags if d.severity == "error"] == []


# ------------------------------------------------------------------ FC803: a required input unset on a path
def test_required_input_unset_on_one_path_names_the_path(make_project):
    diags = run_checks(make_project, """\
  - from: score
    when: "response.score > `0.5`"
    to: decide
    set: {amount: input.amount}
  - {from: score, to: ask}
  - {from: decide, to: pay}
  - {from: ask, to: pay}
  - {from: pay, to: done}
""")
    d = one(diags, "FC803")
    assert "'amount'" in d.message and "score → ask → pay" in d.message
    assert d.file == "orchestration/states/pay.yaml"


def test_required_input_set_on_every_path_is_quiet(make_project):
    diags = run_checks(make_project, """\
  - from: score
    when: "response.score > `0.5`"
    to: decide
    set: {amount: input.amount}
  - {from: score, to: ask, set: {amount: '`0`'}}
  - {from: decide, to: pay}
  - {from: ask, to: pay}
  - {from: pay, to: done}
""")
    assert of(diags, "FC803") == [] and of(diags, "FC804") == []


# ------------------------------------------------------------------ FC804: sometimes defined, in a condition
def test_sometimes_defined_key_in_a_condition_warns_with_the_path(make_project):
    diags = run_checks(make_project, """\
  - from: score
    when: "response.score > `0.5`"
    to: decide
    set: {risk: response.score}
  - {from: score, to: decide}
  - from: decide
    when: "context.risk > `0.9`"
    to: ask
  - {from: decide, to: done}
  - {from: ask, to: stop}
""")
    d = one(diags, "FC804")
    assert d.severity == "warning" and "score → decide" in d.message


def test_sometimes_defined_key_tested_first_is_quiet(make_project):
    diags = run_checks(make_project, """\
  - from: score
    when: "response.score > `0.5`"
    to: decide
    set: {risk: response.score}
  - {from: score, to: decide}
  - from: decide
    when: "context.risk != `null` && context.risk > `0.9`"
    to: ask
  - {from: decide, to: done}
  - {from: ask, to: stop}
""")
    assert of(diags, "FC804") == []


# ------------------------------------------------------------------ FC805: function argument types
def test_function_argument_of_a_type_it_refuses_is_an_error(make_project):
    # a call that fails on every run is an error, so validate exits 1 before the run fails
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "starts_with(context.fraud.score, 'x')"
    to: ask
""" + TAIL)
    d = one(diags, "FC805")
    assert d.severity == "error" and "starts_with()" in d.message and "number" in d.message


def test_function_argument_type_in_a_set_is_an_error(make_project):
    diags = problems(make_project(_when("`true`", set_="{m: 'abs(input.email)'}",
                                        schema="{type: object, properties: {email: {type: string}}}")))
    d = one(diags, "FC805")
    assert d.severity == "error" and "abs()" in d.message and "`input.email` is string" in d.message


def test_array_elements_of_a_refused_type_only_warn(make_project):
    # sum() of an empty array of strings succeeds: the analysis cannot know the call fails
    diags = problems(make_project(_when("sum(input.names) > `1`",
                                        schema="{type: object, properties: {names: {type: array, items: {type: string}}}}")))
    d = one(diags, "FC805")
    assert d.severity == "warning" and "unless it is empty" in d.message


# ------------------------------------------------------------------ the library function
def test_dataflow_is_a_library_function_giving_what_is_defined_on_entry(make_project):
    root = make_project({**REFUND, **flow("""\
  - from: score
    when: "response.score > `0.5`"
    to: decide
    set: {risk: response.score, amount: input.amount}
  - {from: score, to: decide, set: {amount: '`0`'}}
  - {from: decide, to: done}
""")})
    data = flowctl.dataflow(load_project(root), "refunds")
    defined = data.defined("decide")
    assert "context.amount" in defined["always"] and "context.risk" in defined["sometimes"]
    assert data.entry["decide"].field("context")[0].field("amount")[0].only("number", "null")


# ------------------------------------------------------------------ no false errors
def _copy(src: Path, tmp_path: Path) -> Path:
    work = tmp_path / src.name
    shutil.copytree(src, work)
    return work


def test_the_shipped_examples_have_no_data_flow_finding():
    diags = problems(REPO)
    assert [d for d in diags if d.code.startswith("FC8")] == []


def _run_cases():
    group = SHARED_CASES / "run"
    return sorted(p for p in group.iterdir() if p.is_dir()) if group.is_dir() else []


@pytest.mark.parametrize("case", _run_cases(), ids=lambda p: p.name)
def test_shared_run_cases_have_no_data_flow_error(case):
    diags = problems(case)
    assert [d for d in diags if d.code.startswith("FC8") and d.severity == "error"] == []


# ------------------------------------------------------------------ one example per code (test_validate's catalogue)
_CHOICE = {"states/begin.yaml": "id: begin\ntype: choice\n", "states/done.yaml": "id: done\ntype: succeed\n",
           "states/other.yaml": "id: other\ntype: succeed\n"}


def _when(when: str, set_: str = "{}", schema: str = "{type: object, properties: {n: {type: number}}}") -> dict:
    return {**_CHOICE, "transitions/flow.yaml": f"flow: flow\nstart: begin\ninput_schema: {schema}\ntransitions:\n"
                                                f"  - {{from: begin, when: \"{when}\", to: other, set: {set_}}}\n"
                                                "  - {from: begin, to: done}\n"}


CATALOGUE = {
    "FC407": _when("input.n != null"),
    "FC408": _when(" | ".join(["input"] * 200)),
    "FC801": _when("context.nope == `1`"),
    "FC802": _when("input.n == 'one'"),
    "FC803": {**REFUND, **flow("  - {from: score, when: 'response.flagged', to: ask}\n"
                               "  - {from: score, to: pay, set: {amount: input.amount}}\n"
                               "  - {from: ask, to: pay}\n  - {from: pay, to: done}\n"),
              "states/decide.yaml": None, "states/stop.yaml": None},
    "FC804": {**_CHOICE, "states/mid.yaml": "id: mid\ntype: choice\n",
              "transitions/flow.yaml": "flow: flow\nstart: begin\ntransitions:\n"
                                       "  - {from: begin, when: 'input.x', to: mid, set: {k: '`1`'}}\n"
                                       "  - {from: begin, to: mid}\n"
                                       "  - {from: mid, when: 'context.k == `1`', to: other}\n  - {from: mid, to: done}\n"},
    "FC805": _when("abs('x') == `1`"),
}


def test_the_golden_case_flows_have_no_data_flow_error(tmp_path):
    # the flow of the flow-test tests (the shipped golden cases use the shipped flows, above)
    from support import testingkit

    root = testingkit.project(tmp_path)
    assert [d for d in problems(root) if d.code.startswith("FC8") and d.severity == "error"] == []


# ------------------------------------------------------------------ precision: the edges the analysis follows
def test_an_error_edge_the_state_cannot_take_sets_nothing_missing(make_project):
    # PolicyDenied only comes from side-effecting tools: the choice 'decide' cannot take the flow handler
    # to 'ask', so 'ask' is reached only with context.amount set and 'pay' has all it requires
    root = make_project({**REFUND, **flow("""\
  - {from: score, to: decide, set: {amount: '`1`'}}
  - {from: decide, to: ask}
  - {from: ask, to: pay}
  - {from: pay, to: done}
on_error:
  - {errors: [PolicyDenied], goto: ask}
""")})
    assert of(problems(root), "FC803") == []


def test_visits_of_a_state_no_path_enters_first_is_an_error(make_project):
    diags = run_checks(make_project, BASE + """\
  - from: decide
    when: "visits.pay > `1` || visits.decide > `1` || visits.score > `1`"
    to: ask
""" + TAIL)
    d = one(diags, "FC801")
    assert "visits.pay" in d.message


def test_after_a_fallback_the_response_is_the_fallbacks_output(make_project):
    extra = {
        "contracts/cache.v1.0.0.yaml": "id: cache\nversion: 1.0.0\nentrypoint: m:c\noutput_schema:\n  type: object\n"
                                       "  additionalProperties: false\n  properties: {cached: {type: boolean}}\n",
        "states/score.yaml": "id: score\ntype: task\ntool: fraud_score@^1\ninput: {order_id: input.order_id}\n"
                             "on_error:\n  - {errors: [ToolTimeout], fallback: cache@^1}\n",
    }
    diags = run_checks(make_project, """\
  - from: score
    when: "response.cached == `true` || response.score > `1`"
    to: done
  - from: score
    when: "response.nothing"
    to: done
  - {from: score, to: done}
""", extra)
    d = one(diags, "FC801")  # cached (the fallback's) and score (the tool's) are fine; neither has 'nothing'
    assert "response.nothing" in d.message
