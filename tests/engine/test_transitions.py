"""Taking a transition (flowctl.engine.transitions): first match in file order, JMESPath truthiness."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build

FLOW = """flow: f
start: a
transitions:
  - {{from: a, to: first, when: "{when}"}}
  - {{from: a, to: second, when: 'input.go'}}
  - {{from: a, to: done}}
  - {{from: first, to: done}}
  - {{from: second, to: done}}
"""


def _project(tmp_path, when):
    return build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n", "states/first.yaml": "id: first\ntype: pass\n",
                            "states/second.yaml": "id: second\ntype: pass\n", "transitions/f.yaml": FLOW.format(when=when)})


@pytest.mark.parametrize("value, taken", [
    ("`0`", "first"), ("'no'", "first"), ("`[0]`", "first"),            # true in JMESPath (0 too)
    ("`false`", "second"), ("`null`", "second"), ("''", "second"), ("`[]`", "second"), ("`{}`", "second"),
])
def test_the_first_transition_whose_when_is_truthy_is_taken(tmp_path, value, taken):
    h = Harness(_project(tmp_path, value))
    result = h.run(input={"go": True})
    assert result.path == ["a", taken, "done"]
    event = next(e for e in h.events if e["type"] == "transition_taken")
    assert event["data"]["to"] == taken
    assert [c["when"] for c in event["data"]["conditions"]] == [value, "input.go"][:1 if taken == "first" else 2]


def test_a_transition_without_when_is_taken_when_none_before_it_holds(tmp_path):
    result = Harness(_project(tmp_path, "`false`")).run(input={"go": False})
    assert result.path == ["a", "done"]
