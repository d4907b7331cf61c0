"""Semantic versions of tool contracts and the constraints states use to pick one.

A tool reference is ``id`` or ``id@constraint``. Constraints, as in npm/Cargo:

==============  =====================================
``latest``      the highest version (also: no ``@``)
``1.2.3``       exactly that version
``1`` / ``1.2`` any 1.x.x / any 1.2.x
``^1.2.3``      >=1.2.3 <2.0.0 (``^0.2.3``: <0.3.0)
``~1.2.3``      >=1.2.3 <1.3.0 (``~1``: <2.0.0)
==============  =====================================

The highest satisfying version wins. Pre-release versions are only chosen by an exact pin.
"""
from __future__ import annotations

import re

_SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_PARTIAL = re.compile(r"^([\^~]?)(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?(?:\.(0|[1-9][0-9]*))?(?:-([0-9A-Za-z.-]+))?$")


def is_version(text) -> bool:
    """Whether ``text`` is a semantic version (``MAJOR.MINOR.PATCH[-pre][+build]``)."""
    return isinstance(text, str) and _SEMVER.match(text) is not None


def parse_version(text: str) -> tuple:
    """``"3.2.0"`` -> ``(3, 2, 0, (1,))`` — a sortable key; pre-releases sort before the release."""
    m = _SEMVER.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    pre = m.group(4)
    pre_key = (1,) if pre is None else (0, tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), pre_key)


def split_ref(ref: str) -> tuple[str, str]:
    """``"refund_payment@^3"`` -> ``("refund_payment", "^3")``; no ``@`` means ``latest``."""
    tool_id, _, constraint = ref.partition("@")
    return tool_id, constraint or "latest"


def check_constraint(constraint: str) -> None:
    """Raise ``ValueError`` if ``constraint`` is not one of the forms above."""
    if constraint != "latest" and not _PARTIAL.match(constraint):
        raise ValueError(f"{constraint!r} is not a version constraint (use 1.2.3, ^1, ~1.2 or latest)")


def satisfies(version: str, constraint: str) -> bool:
    """Does ``version`` (a full semver) satisfy ``constraint``? Raises ``ValueError`` on bad input."""
    v = parse_version(version)
    if constraint == "latest":
        return v[3] == (1,)
    m = _PARTIAL.match(constraint)
    if not m:
        check_constraint(constraint)
    op, major, minor, patch, pre = m.groups()
    if pre is not None or (op == "" and patch is not None):
        return version.split("+")[0] == constraint.lstrip("^~")
    if v[3] != (1,):
        return False  # pre-releases only by exact pin
    lo = (int(major), int(minor or 0), int(patch or 0))
    have = v[:3]
    if have < lo:
        return False
    if op == "^":
        if lo[0] > 0 or minor is None:
            return have[0] == lo[0]
        if lo[1] > 0 or patch is None:
            return have[0] == 0 and have[1] == lo[1]
        return have == lo
    if op == "~":
        if minor is None:
            return have[0] == lo[0]
        return have[:2] == lo[:2]
    # bare partial: 1 -> 1.x.x, 1.2 -> 1.2.x
    if minor is None:
        return have[0] == lo[0]
    return have[:2] == lo[:2]


def pick(versions, constraint: str):
    """The highest of ``versions`` (strings) satisfying ``constraint``, or ``None``."""
    best = None
    for version in versions:
        if satisfies(version, constraint) and (best is None or parse_version(version) > parse_version(best)):
            best = version
    return best
