"""flowctl.definition.yamlio: YAML 1.2 core-schema reading with positions, and what it refuses."""
from __future__ import annotations

import pytest

from flowctl.definition import yamlio
from flowctl.definition.yamlio import read_document


def codes(doc):
    return [d.code for d in doc.diagnostics]


# ------------------------------------------------------------------ YAML 1.2 core schema scalars
@pytest.mark.parametrize(
    "text, expected",
    [
        ("on", "on"),
        ("off", "off"),
        ("no", "no"),
        ("NO", "NO"),
        ("y", "y"),
        ("Yes", "Yes"),
        ("010", 10),  # YAML 1.2: decimal, not octal 8
        ("12:30", "12:30"),  # YAML 1.1: sexagesimal 750
        ("2024-01-02", "2024-01-02"),  # dates stay strings
        ("1_000", "1_000"),
        ("0b101", "0b101"),
        ("true", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("0x1F", 31),
        ("0o17", 15),
        ("1e3", 1000.0),
        ("-2.5", -2.5),
    ],
)
def test_plain_scalars_resolve_by_the_yaml_1_2_core_schema(text, expected):
    doc = read_document("t.yaml", f"v: {text}\n")
    assert doc.data == {"v": expected}
    assert type(doc.data["v"]) is type(expected)


@pytest.mark.parametrize("text", ["on", "no", "NO", "y", "010", "12:30", "2024-01-02", "off", "1_000"])
def test_yaml_1_1_ambiguous_plain_scalar_is_a_located_warning(text):
    doc = read_document("orchestration/states/x.yaml", f"id: x\nvalue: {text}\n")
    (d,) = doc.diagnostics
    assert d.code == "FC004"
    assert d.severity == "warning"
    assert (d.file, d.line, d.column) == ("orchestration/states/x.yaml", 2, 8)
    assert repr(text) in d.message
    assert f"'{text}'" in d.hint  # tells how to quote it


@pytest.mark.parametrize("quoted", ['"on"', "'no'", '"010"', "'12:30'"])
def test_quoted_scalars_are_strings_without_warning(quoted):
    doc = read_document("t.yaml", f"value: {quoted}\n")
    assert doc.data == {"value": quoted[1:-1]}
    assert doc.diagnostics == []


def test_prose_fields_do_not_warn_about_yaml_1_1_words():
    doc = read_document("t.yaml", "description: no\ncause: yes\nreason: on\n")
    assert doc.data == {"description": "no", "cause": "yes", "reason": "on"}
    assert doc.diagnostics == []


def test_mapping_keys_are_always_their_source_text():
    doc = read_document("t.yaml", "on: 1\n1: a\ntrue: x\nnull: z\n")
    assert doc.data == {"on": 1, "1": "a", "true": "x", "null": "z"}
    assert all(isinstance(k, str) for k in doc.data)


def test_booleans_ids_and_targets_never_change_type_inside_lists():
    doc = read_document("t.yaml", "transitions:\n  - from: y\n    to: on\n  - from: NO\n    to: off\n")
    assert doc.data == {"transitions": [{"from": "y", "to": "on"}, {"from": "NO", "to": "off"}]}
    assert [(d.code, d.line, d.column) for d in doc.diagnostics] == [
        ("FC004", 2, 11), ("FC004", 3, 9), ("FC004", 4, 11), ("FC004", 5, 9)]


# ------------------------------------------------------------------ positions
def test_positions_of_values_and_keys_are_one_based():
    text = "id: a\ntransitions:\n  - from: a\n    to: b\n"
    doc = read_document("t.yaml", text)
    assert doc.at(("id",)) == (1, 5)
    assert doc.at(("id",), key=True) == (1, 1)
    assert doc.at(("transitions", 0)) == (3, 5)
    assert doc.at(("transitions", 0, "to")) == (4, 9)
    assert doc.at(("transitions", 0, "to"), key=True) == (4, 5)
    # an unknown path falls back to its nearest known parent
    assert doc.at(("transitions", 0, "when")) == (3, 5)
    assert doc.at(("nowhere", 3)) == (1, 1)


def test_diag_shifts_the_column_by_offset():
    doc = read_document("f.yaml", "a: 1\nwhen: x == y\n")
    d = doc.diag("FC401", "m", ("when",), offset=5)
    assert (d.file, d.line, d.column, d.severity) == ("f.yaml", 2, 12, "error")


def test_crlf_line_endings_keep_line_numbers():
    doc = read_document("t.yaml", b"a: 1\r\nb: 2\r\nc: 3\r\n")
    assert doc.data == {"a": 1, "b": 2, "c": 3}
    assert doc.at(("c",)) == (3, 4)


def test_utf8_bom_is_accepted():
    doc = read_document("t.yaml", b"\xef\xbb\xbfid: a\n")
    assert doc.data == {"id": "a"}
    assert doc.diagnostics == []


def test_json_is_read_with_positions():
    doc = read_document("t.json", '{"id": "a",\n "n": [1, {"on": "no"}]}')
    assert doc.data == {"id": "a", "n": [1, {"on": "no"}]}
    assert doc.diagnostics == []
    assert doc.at(("n", 1, "on")) == (2, 18)
    assert doc.at(("n", 1, "on"), key=True) == (2, 12)


def test_tab_indented_json_is_valid_json():
    text = '{\n\t"id": "a",\n\t"input": {\n\t\t"x":\t"context.x"\n\t}\n}\n'
    doc = read_document("orchestration/states/a.json", text)
    assert doc.diagnostics == []
    assert doc.data == {"id": "a", "input": {"x": "context.x"}}
    assert doc.at(("input", "x")) == (4, 8)


def test_tabs_inside_json_strings_are_kept():
    doc = read_document("t.json", '{"a": "x\ty",\t"b": 1}')
    assert doc.data == {"a": "x\ty", "b": 1}


def test_tab_indented_yaml_is_a_located_syntax_error():
    doc = read_document("t.yaml", "a:\n\tb: 1\n")
    (d,) = doc.diagnostics
    assert (d.code, d.line, d.column) == ("FC001", 2, 1)
    assert doc.data is None


# ------------------------------------------------------------------ duplicate keys
def test_duplicate_key_names_both_lines_and_points_at_the_second():
    doc = read_document("orchestration/transitions/f.yaml", "from: a\nto: b\nwhen: x\nto: c\n")
    (d,) = doc.diagnostics
    assert (d.code, d.severity) == ("FC002", "error")
    assert (d.file, d.line, d.column) == ("orchestration/transitions/f.yaml", 4, 1)
    assert "line 2" in d.message and "line 4" in d.message
    assert "'to'" in d.message


def test_duplicate_key_in_a_nested_list_item():
    doc = read_document("t.yaml", "transitions:\n  - from: a\n    to: b\n    to: c\n")
    (d,) = doc.diagnostics
    assert (d.code, d.line, d.column) == ("FC002", 4, 5)
    assert "line 3" in d.message


def test_duplicate_key_in_json():
    doc = read_document("t.json", '{"a": 1,\n "a": 2}')
    assert [(d.code, d.line, d.column) for d in doc.diagnostics] == [("FC002", 2, 2)]


def test_same_key_in_different_mappings_is_fine():
    doc = read_document("t.yaml", "a: {x: 1}\nb: {x: 2}\n")
    assert doc.diagnostics == []


# ------------------------------------------------------------------ limits (FC003)
def _laughs(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_without_expanding():
    doc = read_document("bomb.yaml", _laughs())
    assert doc.data is None
    assert codes(doc) == ["FC003"]
    assert doc.diagnostics[0].severity == "error"
    assert "alias" in doc.diagnostics[0].message
    assert doc.positions == {}  # nothing was built


def test_recursive_alias_is_refused():
    doc = read_document("t.yaml", "a: &x [1, *x]\n")
    assert doc.data is None
    assert codes(doc) == ["FC003"]


def test_modest_aliases_still_work():
    doc = read_document("t.yaml", "base: &b {x: 1, y: 2}\nother: *b\n")
    assert doc.data == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 2}}
    assert doc.diagnostics == []


def test_merge_keys_let_explicit_keys_win():
    doc = read_document("t.yaml", "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
    assert doc.data["other"] == {"x": 1, "y": 3}


def test_file_over_the_size_limit_is_refused(monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_FILE_BYTES", 64)
    ok = read_document("t.yaml", b"a: " + b"x" * 60 + b"\n")  # 64 bytes: at the limit
    assert ok.data == {"a": "x" * 60}
    big = read_document("t.yaml", b"a: " + b"x" * 61 + b"\n")  # 65 bytes
    assert big.data is None
    (d,) = big.diagnostics
    assert (d.code, d.line, d.column) == ("FC003", 1, 1)
    assert "65" in d.message and "64" in d.message


def test_default_size_limit_is_one_mebibyte():
    doc = read_document("t.yaml", b"a: " + b"x" * yamlio.MAX_FILE_BYTES)
    assert doc.data is None
    assert codes(doc) == ["FC003"]


def test_deep_nesting_is_refused_not_a_crash():
    doc = read_document("t.yaml", "[" * 300 + "]" * 300)
    assert doc.data is None
    assert codes(doc) == ["FC003"]
    very = read_document("t.yaml", "[" * 20000 + "]" * 20000)
    assert very.data is None
    assert [d.severity for d in very.diagnostics] == ["error"]


# ------------------------------------------------------------------ tags (FC007): nothing is constructed
@pytest.mark.parametrize(
    "text",
    [
        'a: !!python/object/apply:os.system ["echo pwned"]\n',
        "a: !!python/name:os.system\n",
        "a: !custom thing\n",
        "a: !!binary aGk=\n",
        "a: !!timestamp 2001-12-14\n",
        "a: !!set {x}\n",
    ],
)
def test_non_core_tags_are_refused_and_nothing_is_constructed(text):
    doc = read_document("t.yaml", text)
    (d,) = doc.diagnostics
    assert (d.code, d.severity, d.line, d.column) == ("FC007", "error", 1, 4)

    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, int, float, bool))

    assert plain(doc.data)


def test_core_tags_are_allowed():
    doc = read_document("t.yaml", 'a: !!str 10\nb: !!int "7"\n')
    assert doc.data == {"a": "10", "b": 7}
    assert [d.code for d in doc.diagnostics if d.severity == "error"] == []


# ------------------------------------------------------------------ unreadable files (FC001, FC010)
def test_syntax_error_is_located():
    doc = read_document("orchestration/states/a.yaml", "id: a\ntype: [task\n")
    (d,) = doc.diagnostics
    assert (d.code, d.file, d.line) == ("FC001", "orchestration/states/a.yaml", 3)
    assert doc.data is None


def test_mapping_value_where_none_is_allowed():
    doc = read_document("t.yaml", "id: a\ntype: task: b\n")
    (d,) = doc.diagnostics
    assert (d.code, d.line, d.column) == ("FC001", 2, 11)


def test_not_utf8_is_a_syntax_error():
    doc = read_document("t.yaml", b"id: caf\xe9\n")
    assert codes(doc) == ["FC001"]
    assert "UTF-8" in doc.diagnostics[0].message
    assert doc.data is None


def test_nul_character_is_refused():
    doc = read_document("t.yaml", "id: a\0\n")
    assert codes(doc) == ["FC001"]


def test_several_documents_in_one_file_are_refused():
    doc = read_document("t.yaml", "a: 1\n---\nb: 2\n")
    (d,) = doc.diagnostics
    assert (d.code, d.line) == ("FC001", 2)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n   \n"])
def test_empty_file_is_reported(text):
    doc = read_document("t.yaml", text)
    assert doc.data is None
    assert codes(doc) == ["FC010"]
    assert "empty" in doc.diagnostics[0].message


@pytest.mark.parametrize("text", ["---\n", "~\n", "null\n"])
def test_a_null_document_reads_as_none(text):
    # readable, so no diagnostic here; the loader refuses it as a definition (test_loader)
    doc = read_document("t.yaml", text)
    assert doc.data is None


def test_non_scalar_key_is_reported():
    doc = read_document("t.yaml", "? [a, b]\n: 1\nc: 2\n")
    assert doc.data == {"c": 2}
    assert [(d.code, d.line, d.column) for d in doc.diagnostics] == [("FC010", 1, 3)]


# ------------------------------------------------------------------ loads()
def test_loads_returns_data_or_raises_value_error_with_location():
    assert yamlio.loads("a: on\n") == {"a": "on"}
    with pytest.raises(ValueError, match=r"x\.yaml:2:1: duplicate key 'a'"):
        yamlio.loads("a: 1\na: 2\n", "x.yaml")
    with pytest.raises(ValueError):
        yamlio.loads("")


@pytest.mark.parametrize("text, where, hint", [
    ('id: a\ntype: task\ntool: "x\ninput: {a: b}\n', "that starts at 3:7", "the quote opened at line 3, column 7 is not closed"),
    ("id: a\ntype: task\ninput:\n\ta: b\n", "", "never tabs"),
    ('id: a\ntool: "x\ninput: {a: b}\nnext: "c"\nmore: d\n', "that starts at 1:1", "a quote or bracket opened on an earlier line"),
])
def test_a_yaml_syntax_error_says_where_what_it_was_reading_began_and_how_to_fix_the_usual_causes(text, where, hint):
    """(new-user finding: an unclosed quote was reported lines later with no hint, a tab with none)"""
    from flowctl.definition.yamlio import read_document

    (d,) = read_document("s.yaml", text).diagnostics
    assert d.code == "FC001" and where in d.message and hint in d.hint, (d.message, d.hint)
