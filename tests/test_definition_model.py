"""flowctl.definition.model: the model classes compare, hash and print as frozen dataclasses do
(by the fields that take part), though their ``==``, ``hash`` and ``repr`` are written once."""
from __future__ import annotations

import dataclasses

import pytest

from flowctl.definition.loader import load_files
from flowctl.definition.model import Limits, Retry, TaskState
from support.helpers import MINIMAL

STATE = "id: a\ntype: task\ntool: t@^1\ninput: {x: input.x}\ntimeout: 3s\n"


def _state(text: str, rel: str = "orchestration/states/a.yaml") -> TaskState:
    return load_files({rel: text.encode()}).states["a"]


def test_the_same_state_loaded_twice_is_equal_wherever_it_was_written():
    one = _state(STATE)
    other = _state("# moved down a line\n" + STATE, "orchestration/states/a.yml")
    assert one is not other and one.doc is not other.doc  # doc and path do not take part
    assert one == other
    assert not one != other


def test_a_state_differing_in_one_field_is_not_equal():
    assert _state(STATE) != _state(STATE.replace("3s", "4s"))
    assert _state(STATE) != _state(STATE.replace("input.x", "input.y"))


def test_equality_is_only_between_the_same_model_class():
    retry = Retry(doc=None, errors=("X",))
    assert retry == Retry(doc=None, errors=("X",))
    assert retry != dataclasses.replace(retry, max_attempts=4)
    assert retry.__eq__(object()) is NotImplemented
    assert Limits() == Limits() and Limits() != Limits(max_steps=5)


def test_hash_follows_equality_and_a_model_holding_a_dict_is_unhashable():
    assert hash(Retry(doc=None, errors=("X",))) == hash(Retry(doc="elsewhere", errors=("X",)))
    assert len({Limits(), Limits(), Limits(max_steps=5)}) == 2
    with pytest.raises(TypeError):
        hash(_state(STATE))  # input is a mapping, as with a generated dataclass hash


def test_models_stay_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().max_steps = 5  # type: ignore[misc]


def test_repr_names_the_class_and_the_fields_but_not_the_document():
    text = repr(Retry(doc="the document", errors=("X",), max_attempts=2))
    assert text.startswith("Retry(errors=('X',), max_attempts=2, interval=1.0")
    assert "the document" not in text and "path=" not in text
    assert repr(_state(STATE)).startswith("TaskState(id='a', type='task'")


def test_a_loaded_project_prints_its_root_and_states(make_project):
    from flowctl.definition.loader import load_project

    project = load_project(make_project(MINIMAL))
    assert project == project
    assert repr(project).startswith(f"Project(root={project.root!r}, states=")
