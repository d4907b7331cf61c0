"""flowctl.definition.versions: semantic versions and the constraints tool references use (^ ~ exact latest)."""
from __future__ import annotations

import pytest

from flowctl.definition.versions import check_constraint, parse_version, pick, satisfies, split_ref

VERSIONS = ["0.2.3", "0.2.9", "0.3.0", "1.0.0", "1.2.0", "1.2.7", "1.10.0", "2.0.0-rc.1", "2.0.0", "2.1.0-beta"]


@pytest.mark.parametrize("ref, expected", [
    ("refund_payment@^3", ("refund_payment", "^3")),
    ("refund_payment", ("refund_payment", "latest")),
    ("a@1.2.3", ("a", "1.2.3")),
    ("a@latest", ("a", "latest")),
])
def test_split_ref(ref, expected):
    assert split_ref(ref) == expected


def test_versions_sort_semantically_and_pre_releases_before_the_release():
    ordered = sorted(["1.10.0", "1.9.0", "2.0.0", "2.0.0-rc.1", "2.0.0-alpha", "2.0.0-rc.2", "0.9.9"], key=parse_version)
    assert ordered == ["0.9.9", "1.9.0", "1.10.0", "2.0.0-alpha", "2.0.0-rc.1", "2.0.0-rc.2", "2.0.0"]
    assert parse_version("3.2.0") == (3, 2, 0, (1,))
    assert parse_version("1.0.0+build.5") == parse_version("1.0.0")


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", "01.2.3", "1.2.3.4", "", "latest"])
def test_parse_version_refuses_non_semver(bad):
    with pytest.raises(ValueError):
        parse_version(bad)


@pytest.mark.parametrize("constraint, expected", [
    ("latest", "2.0.0"),  # the highest release, never a pre-release
    ("^1", "1.10.0"),
    ("^1.2", "1.10.0"),
    ("^1.2.3", "1.10.0"),
    ("^0.2.3", "0.2.9"),  # ^0.x: the minor is the breaking part
    ("^0.3", "0.3.0"),
    ("~1.2", "1.2.7"),
    ("~1.2.3", "1.2.7"),
    ("~1", "1.10.0"),
    ("1", "1.10.0"),  # bare partials: any 1.x.x
    ("1.2", "1.2.7"),
    ("1.2.0", "1.2.0"),  # exact
    ("2.0.0-rc.1", "2.0.0-rc.1"),  # a pre-release only by an exact pin
    ("^2", "2.0.0"),
    ("^3", None),
    ("~1.3", None),
    ("1.2.1", None),
])
def test_pick_the_highest_satisfying_version(constraint, expected):
    assert pick(VERSIONS, constraint) == expected


def test_caret_zero_zero_is_exact():
    assert pick(["0.0.3", "0.0.4", "0.1.0"], "^0.0.3") == "0.0.3"


def test_pre_releases_are_not_picked_by_ranges():
    assert not satisfies("2.1.0-beta", "^2")
    assert not satisfies("2.1.0-beta", "latest")
    assert satisfies("2.1.0-beta", "2.1.0-beta")
    assert pick(["1.0.0-rc.1"], "^1") is None


@pytest.mark.parametrize("bad", [">=1", "1.x", "^", "~v1", "1.2.3.4", "*", "^1 || ^2"])
def test_malformed_constraints_are_refused(bad):
    with pytest.raises(ValueError, match="not a version constraint"):
        check_constraint(bad)
    with pytest.raises(ValueError):
        satisfies("1.0.0", bad)


@pytest.mark.parametrize("good", ["latest", "1", "1.2", "1.2.3", "^1", "~1.2", "^0.2.3", "1.0.0-rc.1"])
def test_well_formed_constraints_pass(good):
    check_constraint(good)
