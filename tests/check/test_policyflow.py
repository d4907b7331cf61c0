"""FC801/FC802 for policy expressions (flowctl.check.policyflow): what a rule reads of the input
of the tools it applies to, checked against their contracts' input_schema. (New-user finding: a
misspelt review_when passed validate --strict and silently skipped the human review.)"""
from __future__ import annotations

from support.helpers import of, problems, where

SCHEMA = ("input_schema:\n  type: object\n  additionalProperties: false\n  properties:\n"
          "    email: {type: string}\n    plan: {type: string}\n    seats: {type: integer}\n")
FILES = {
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/open.yaml": "id: open\ntype: task\ntool: open_account@^1\ninput: {email: input.email, plan: input.plan}\n",
    "contracts/open_account.v1.0.0.yaml": "id: open_account\nversion: 1.0.0\nentrypoint: m:open_account\n"
                                          "verify: m:v\ncompensate: m:u\nside_effects:\n  - {type: database_write, target: t}\n"
                                          + SCHEMA,
    "transitions/signup.yaml": "flow: signup\nstart: open\ntransitions:\n  - {from: open, to: done}\n",
    "tools/m.py": "def open_account(input, call):\n    return {}\n\ndef v(input, output, call):\n    return True\n\n"
                  "def u(input, output, call):\n    pass\n",
}


def _policy(body: str) -> dict:
    return dict(FILES, **{"policies/accounts.yaml": "policy: accounts\napplies_to: [open_account]\n" + body})


def test_a_misspelt_field_in_review_when_is_an_error_with_a_hint(make_project):
    (d,) = of(problems(make_project(_policy("allow: []\nreview_when: \"input.plna == 'team'\"\n"))), "FC801")
    assert where(d) == ("orchestration/policies/accounts.yaml", 4, 21) and d.severity == "error"
    assert "no field 'plna'" in d.message and "email, plan, seats" in d.message and "'plan'" in d.hint


def test_a_misspelt_allow_field_and_an_operand_expression_are_errors(make_project):
    body = "allow:\n  - {field: input.plna, in: [free, team]}\n  - {field: input.seats, range: [1, {expr: input.seatz}]}\n"
    found = of(problems(make_project(_policy(body))), "FC801")
    assert sorted(d.message.split("no field ")[1].split(" ")[0] for d in found) == ["'plna'", "'seatz'"]


def test_a_comparison_of_different_types_is_fc802(make_project):
    (d,) = of(problems(make_project(_policy("allow: []\nreview_when: \"input.seats > '100'\"\n"))), "FC802")
    assert "a number" in d.message and "a string" in d.message


def test_fields_the_schema_has_and_names_it_cannot_know_pass(make_project):
    body = ("allow:\n  - {field: input.plan, in: [free, team]}\n"
            "review_when: \"input.seats > `50` && run.flow == 'signup' && context.anything\"\n")
    found = problems(make_project(_policy(body)))
    assert of(found, "FC801") == [] and of(found, "FC802") == []


def test_a_field_any_applied_contract_has_is_a_field(make_project):
    files = _policy("allow: []\nreview_when: \"input.card == 'x'\"\n")
    files["contracts/charge.v1.0.0.yaml"] = (files["contracts/open_account.v1.0.0.yaml"]
                                             .replace("id: open_account", "id: charge")
                                             .replace("email: {type: string}", "card: {type: string}"))
    files["policies/accounts.yaml"] = files["policies/accounts.yaml"].replace("[open_account]", "[open_account, charge]")
    assert of(problems(make_project(files)), "FC801") == []
