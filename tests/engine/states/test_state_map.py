"""``type: map`` (flowctl.engine.states.map): one child run per item (or per batch of
``batch.max_items``), at most ``max_items`` items, the response in item order."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.fanoutflows import CHILD, TOOLS, parent


def test_map_batches(tmp_path):
    files = {**CHILD,
             "transitions/batch.yaml": "flow: batch\nstart: w\ntransitions:\n  - {from: w, to: done}\noutput: input.items\n",
             **parent("id: fan\ntype: map\nitems: input.items\nflow: batch\nbatch: {max_items: 2}\n")}
    files["states/w.yaml"] = "id: w\ntype: task\ntool: work@^1\ninput: {name: \"'batch'\"}\n"
    h = Harness(build(tmp_path, files, TOOLS))
    result = h.run(input={"items": [1, 2, 3, 4, 5]})
    assert result.output == [1, 2, 3, 4, 5]
    assert len(h.store.list_runs(parent_id=result.run_id, limit=0)) == 3

def test_map_item_limit_is_refused_clearly(tmp_path):
    files = {**CHILD, **parent("id: fan\ntype: map\nitems: input.items\nflow: child\nmax_items: 3\n")}
    result = Harness(build(tmp_path, files, TOOLS)).run(input={"items": [1, 2, 3, 4]})
    assert result.error["code"] == "MAX_STEPS_EXCEEDED" and "max_items is 3" in result.error["message"]


ECHO = {"states/echo.yaml": "id: echo\ntype: pass\nset: {got: input}\n",
        "transitions/each.yaml": "flow: each\nstart: echo\ntransitions:\n  - {from: echo, to: done}\noutput: context.got\n"}


def test_item_input_sees_the_item_and_its_index(tmp_path):
    files = {**ECHO, **parent("id: fan\ntype: map\nitems: input.items\nflow: each\nitem_input: {name: item, at: index}\n")}
    result = Harness(build(tmp_path, files)).run(input={"items": ["a", "b", "c"]})
    assert result.output == [{"name": "a", "at": 0}, {"name": "b", "at": 1}, {"name": "c", "at": 2}]


def test_items_that_are_not_a_list_fail_the_step(tmp_path):
    files = {**ECHO, **parent("id: fan\ntype: map\nitems: input.items\nflow: each\n")}
    h = Harness(build(tmp_path, files))
    result = h.run(input={"items": {"a": 1}})
    assert result.error["code"] == "EXPRESSION_ERROR" and "gave dict, not a list" in result.error["message"]
    assert h.store.list_runs(parent_id=result.run_id, limit=0) == []
