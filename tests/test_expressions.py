"""flowctl.expr.expressions: compiled JMESPath with flowctl's functions, and the lint behind FC401-FC404."""
from __future__ import annotations

import re
import warnings

import pytest

from flowctl.errors import ExpressionError
from flowctl.expr.expressions import RECORDER, Recorder, compile_expr, lint


def ev(text, scope=None):
    return compile_expr(text).evaluate(scope or {})


# ------------------------------------------------------------------ evaluation
def test_evaluates_on_the_run_scope():
    scope = {"input": {"order_id": "A-1"}, "response": {"status": "success"}, "visits": {"s": 2}}
    assert ev("input.order_id", scope) == "A-1"
    assert ev("response.status == 'success' && visits.s < `3`", scope) is True
    assert ev("context.missing", scope) is None


def test_compiled_once_per_text_and_location():
    assert compile_expr("a.b") is compile_expr("a.b")
    assert compile_expr("a.b", "f.yaml:3") is not compile_expr("a.b", "f.yaml:4")


def test_evaluation_errors_are_expression_errors_naming_text_and_place():
    with pytest.raises(ExpressionError) as info:
        compile_expr("divide(`1`, `0`)", "orchestration/transitions/f.yaml:7").evaluate({})
    assert "divide(`1`, `0`)" in info.value.message
    assert "orchestration/transitions/f.yaml:7" in info.value.message
    with pytest.raises(ExpressionError):
        ev("input.a < input.b", {"input": {"a": 5, "b": "10"}})
    with pytest.raises(ExpressionError):
        ev("add('a', `1`)")
    with pytest.raises(ExpressionError):
        ev("from_json('{bad')")


def test_syntax_errors_raise_at_compile_time():
    import jmespath.exceptions

    with pytest.raises(jmespath.exceptions.ParseError):
        compile_expr("input.[x")


@pytest.mark.parametrize("text, scope, expected", [
    ("add(`1`, `2`)", {}, 3),
    ("subtract(`5`, `2`)", {}, 3),
    ("multiply(`2`, `2.5`)", {}, 5.0),
    ("divide(`9`, `2`)", {}, 4.5),
    ("glob('report.txt', '*.txt')", {}, True),
    ("glob('report.TXT', '*.txt')", {}, False),  # case-sensitive
    ("has(@, 'x')", {"x": None}, True),  # present even if null
    ("has(@, 'y')", {"x": None}, False),
    ("to_epoch('1970-01-02T00:00:00')", {}, 86400.0),  # naive = UTC
    ("to_epoch('1970-01-01T01:00:00+01:00')", {}, 0.0),
    ("date_add('2024-01-01T00:00:00Z', '90m')", {}, "2024-01-01T01:30:00Z"),
    ("date_add('2024-01-01T00:00:00Z', `60`)", {}, "2024-01-01T00:01:00Z"),
    ("to_json(@)", {"b": 1, "a": [1, "é"]}, '{"a":[1,"é"],"b":1}'),
    ("from_json(s)", {"s": '{"a": [1]}'}, {"a": [1]}),
])
def test_flowctl_functions(text, scope, expected):
    assert ev(text, scope) == expected


def test_date_add_refuses_a_duration_without_units():
    with pytest.raises(ExpressionError, match="not a duration"):
        ev("date_add('2024-01-01T00:00:00Z', '1 h')")


def test_uuid_and_now_are_recorded_and_replayed():
    rec = Recorder()
    token = RECORDER.set(rec)
    try:
        u = ev("uuid()")
        n = ev("now()")
    finally:
        RECORDER.reset(token)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", u)
    assert n.endswith("Z")
    assert rec.recorded == [{"kind": "uuid", "value": u}, {"kind": "now", "value": n}]
    replay = Recorder(replay=rec.recorded)
    token = RECORDER.set(replay)
    try:
        assert (ev("uuid()"), ev("now()")) == (u, n)
    finally:
        RECORDER.reset(token)


def test_now_uses_the_recorder_clock():
    from datetime import datetime, timezone

    class Clock:
        def now(self):
            return datetime(2030, 5, 6, 7, 8, 9, tzinfo=timezone.utc)

    token = RECORDER.set(Recorder(clock=Clock()))
    try:
        assert ev("now()") == "2030-05-06T07:08:09Z"
    finally:
        RECORDER.reset(token)


# ------------------------------------------------------------------ lint
def codes(text):
    return [(code, offset) for code, offset, _, _ in lint(text)]


@pytest.mark.parametrize("text", [
    "input.order_id",
    "response.status == 'success' && visits.get_logistics < `3`",
    "length(input.items) > `3`",
    "to_json(@) == `{\"a\": 1}`",
    "{refund: context.refund_id, status: context.logistics_status}",
    "join('-', ['refund', input.order_id])",
    "uuid()",
    "date_add(now(), '1h')",
    "input.x == `true`",
    "a\n.b",
])
def test_good_expressions_have_no_problems(text):
    assert lint(text) == []


@pytest.mark.parametrize("text, offset", [
    ("input.x = 'a'", 8),  # lexer: single '='
    ("input.x == 'a", 11),  # lexer: unclosed quote
    ("input.#", 6),
    ("input.[x", 8),  # parser: ends too early
    ("{a: context.x", 13),
    ("input.a && ", 11),
    ("a ]", 2),
])
def test_fc401_syntax_error_offset_points_at_the_problem(text, offset):
    ((code, off, message, hint),) = lint(text)
    assert (code, off) == ("FC401", offset)
    assert repr(text) in message
    assert f"(column {offset + 1})" in message
    assert "jmespath.org" in hint


def test_fc401_lexer_message_is_specific():
    ((_, _, message, _),) = lint("input.x = 'a'")
    assert "Unknown token '='" in message


def test_fc401_empty_and_pathological_expressions_do_not_raise():
    assert codes("") == [("FC401", 0)]
    assert codes("  ") == [("FC401", 2)]
    assert codes("(" * 5000 + "a" + ")" * 5000) == [("FC401", 0)]
    assert codes("`" + "[" * 100000 + "]" * 100000 + "`") == [("FC401", 0)]


def test_fc402_double_quoted_string_next_to_a_comparison():
    assert codes('input.status == "ok"') == [("FC402", 16)]
    assert codes('"a" == input.x && input.y != "b"') == [("FC402", 0), ("FC402", 29)]
    # a quoted identifier used as a field name is fine
    assert codes('input."order-id"') == []


def test_fc403_backtick_literal_that_is_not_json():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = lint("input.x == `ok`")
    ((code, offset, message, hint),) = found
    assert (code, offset) == ("FC403", 11)
    assert "`ok`" in message
    assert hint.startswith("write 'ok'")


def test_fc404_unknown_function_offset():
    assert codes("upper(input.name)") == [("FC404", 0)]
    assert codes("input.a || lower(x)") == [("FC404", 11)]
    assert codes("length(input.items)") == []


def test_fc404_suggests_the_close_function_of_a_misspelt_one():
    ((_, _, _, hint),) = lint("lenght(input.items)")
    assert hint == "did you mean length()?"
    ((_, _, _, hint),) = lint("zzz(input.items)")
    assert hint.startswith("known: ") and "length" in hint


# ------------------------------------------------------------------ bare literals and nesting (issue 15)
RUN_NAMES = ("input", "params", "context", "response", "error", "review", "visits", "state", "run", "item", "index")


@pytest.mark.parametrize("word", ["true", "false"])
def test_fc406_a_bare_true_or_false_is_an_error_with_the_backtick_fix(word):
    ((code, offset, message, hint),) = lint(f"input.flag == {word}", RUN_NAMES)
    assert (code, offset) == ("FC406", 14)
    assert f"`{word}`" in hint and "field name" in message


def test_fc407_a_bare_null_is_a_warning_with_the_fix_and_means_null():
    ((code, offset, message, hint),) = lint("input.x != null", RUN_NAMES)
    assert (code, offset) == ("FC407", 11)
    assert "`null`" in hint
    assert ev("input.x != null", {"input": {"x": 1}}) is True and ev("input.x != null", {"input": {}}) is False


@pytest.mark.parametrize("text", [" | ".join(["input"] * 10_000), " && ".join(["input.a"] * 50_000)],
                         ids=["10^4 pipes", "5x10^4 &&"])
def test_fc408_expressions_too_deep_to_run_are_refused(text):
    with pytest.raises(RecursionError):  # what a run would meet
        compile_expr(text).evaluate({"input": {"a": 1}})
    assert [c for c, *_ in lint(text, RUN_NAMES)] == ["FC408"]


def test_fc408_leaves_long_flat_expressions_alone():
    assert lint(" && ".join(["input.a"] * 100), RUN_NAMES) == []
    assert lint(".".join(["input"] + ["a"] * 5000), RUN_NAMES) == []


def test_a_bare_null_does_not_refuse_the_run(tmp_path):
    import flowctl
    from flowctl.store.sql import MemoryStore
    from support.helpers import MINIMAL, write_project

    files = {**MINIMAL, "states/other.yaml": "id: other\ntype: succeed\n",
             "transitions/flow.yaml": "flow: flow\nstart: begin\ntransitions:\n"
                                      "  - {from: begin, when: 'input.x != null', to: other}\n  - {from: begin, to: done}\n"}
    project = flowctl.load_project(write_project(tmp_path / "p", files))
    assert [d.code for d in flowctl.validate(project)] == ["FC407"]
    result = flowctl.Engine(project, MemoryStore()).run("flow", {"x": 1})
    assert result.status == "succeeded" and result.path == ["begin", "other"]


# ------------------------------------------------------------------ non-finite numbers
@pytest.mark.parametrize("text, scope", [
    ("divide(`1`, input.z)", {"input": {"z": 1e-320}}),
    ("multiply(input.z, input.z)", {"input": {"z": 1e200}}),
    ("add(input.z, input.z)", {"input": {"z": 1.7e308}}),
    ("subtract(input.z, multiply(input.z, `-1`))", {"input": {"z": 1.7e308}}),
    ("to_number('Infinity')", {}),
    ("to_number('-inf')", {}),
    ("to_number('NaN')", {}),
    ("sum(input.zs)", {"input": {"zs": [1.7e308, 1.7e308]}}),
    ("from_json('[NaN]')", {}),
    ("from_json('{\"a\": 1e999}')", {}),
])
def test_no_function_gives_a_non_finite_number_it_is_a_located_expression_error(text, scope):
    with pytest.raises(ExpressionError, match="not a finite number") as info:
        compile_expr(text, "states/s.yaml:4").evaluate(scope)
    assert "states/s.yaml:4" in str(info.value)
    assert ev("divide(`1`, `4`)") == 0.25 and ev("to_number('1e3')") == 1000.0  # finite results unchanged


def test_a_non_finite_result_fails_the_state_and_is_never_stored(tmp_path):
    import json

    from support.enginekit import Harness, build, sqlite_store

    root = build(tmp_path, {
        "states/a.yaml": "id: a\ntype: pass\nset: {c: \"divide(`1`, input.z)\"}\n",
        "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.type}\n",
        "transitions/f.yaml": "flow: f\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: done}\n"
                              "on_error:\n  - {errors: [ExpressionError], goto: failed}\n",
    })
    store = sqlite_store(tmp_path)
    h = Harness(root, store=store)
    result = h.run(input={"z": 1e-320})
    assert result.status == "failed" and result.path == ["a", "failed"]  # the handler applied
    for event in h.events:
        json.dumps(event, allow_nan=False, default=str)
    import sqlite3

    con = sqlite3.connect(tmp_path / "flowctl.db")
    for table, in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        for row in con.execute(f"SELECT * FROM {table}"):
            assert not any(isinstance(v, str) and ("Infinity" in v or "NaN" in v) for v in row), (table, row)


@pytest.mark.parametrize("text, hint", [
    ("context.amount > 100", "write `100`"),
    ("context.n == -1", "write `-1`"),
    ("context.rate > 1.5", "write `1.5`"),
    ("refunded ok", "\"'refunded ok'\""),
])
def test_a_number_or_text_without_its_quotes_is_told_how_to_write_it(text, hint):
    """(new-user finding: both got only the address of the JMESPath specification)"""
    (code, _, _, got), = lint(text, names=("context", "input"))
    assert code == "FC401" and hint in got, got


def test_a_whole_expression_of_one_bare_word_is_told_yaml_took_its_quotes():
    (code, _, _, hint), = lint("done", names=("context", "input"))
    assert code == "FC406" and "\"'done'\"" in hint and "YAML" in hint
