"""FC610 (flowctl.check.masked): a review's ``show`` field that the server and console mask,
because a contract the flow calls marks that name sensitive."""
from __future__ import annotations

from support.helpers import of, problems, where

FILES = {
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/greet.yaml": "id: greet\ntype: task\ntool: welcome@^1\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [ok]\nshow:\n  plan: input.plan\n  who:\n    email: input.email\n",
    "contracts/welcome.v1.0.0.yaml": "id: welcome\nversion: 1.0.0\nentrypoint: m:welcome\nsensitive: [email]\n"
                                     "input_schema: {type: object, properties: {email: {type: string}}}\n",
    "transitions/flow.yaml": "flow: flow\nstart: greet\ntransitions:\n  - {from: greet, to: ask}\n  - {from: ask, to: done}\n",
    "tools/m.py": "def welcome(input, call):\n    return {}\n",
}


def test_a_shown_field_a_contract_of_the_flow_marks_sensitive_is_a_located_warning(make_project):
    (d,) = of(problems(make_project(FILES)), "FC610")
    assert where(d) == ("orchestration/states/ask.yaml", 7, 5) and d.severity == "warning"
    assert "'email'" in d.message and "welcome@1.0.0" in d.message and "last four digits" in d.hint


def test_a_name_no_contract_of_the_flow_marks_is_not_reported(make_project):
    files = dict(FILES, **{"contracts/welcome.v1.0.0.yaml": FILES["contracts/welcome.v1.0.0.yaml"].replace(
        "sensitive: [email]", "sensitive: [card]").replace("email: {type: string}", "card: {type: string}")})
    assert of(problems(make_project(files)), "FC610") == []
