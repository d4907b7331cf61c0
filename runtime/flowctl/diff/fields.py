"""Field-level comparison of two definitions as written, and the risk rules of :mod:`flowctl.diff.core`.

:func:`field_changes` walks two JSON-like values (a file's data) and returns one
:class:`FieldChange` per differing leaf, with a readable path: ``retry.max_attempts``,
``input_schema.properties.carrier.enum``, ``side_effects[database_write:payment_transactions]``,
``allow[input.amount].range``. Lists of rules are matched by what identifies them (see
:data:`KEYED_LISTS`), not by position, so inserting a rule does not show every later one as changed.
Durations compare by value (``3s`` equals ``3000ms``).

:func:`policy_risks` and :func:`contract_risks` say what makes a change risky: a policy that now
allows more (a check removed, a range widened, a value added to ``in``, a tool added to
``applies_to``, a rate or dedupe limit raised or removed, ``review_when`` removed), and a contract
that gains a side effect or loses its verify/compensate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from flowctl.definition.durations import parse_duration


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
DURATION_KEYS = frozenset({"timeout", "interval", "max_delay", "window", "duration", "remind_after"})


def _errors_key(item) -> str:
    return ",".join(str(e) for e in item.get("errors") or ())


#: list field -> (key of an item, collapse: match positionally when both sides hold one item)
KEYED_LISTS: dict[str, tuple[Callable[[dict], str], bool]] = {
    "retry": (_errors_key, True),
    "on_error": (_errors_key, True),
    "side_effects": (lambda i: f"{i.get('type')}:{i.get('target')}", False),
    "allow": (lambda i: str(i.get("field")), False),
}


@dataclass(frozen=True)
class FieldChange:
    """One differing field. ``before``/``after`` are :data:`MISSING` when the field is absent on that side."""

    path: str
    before: Any = MISSING
    after: Any = MISSING

    @property
    def op(self) -> str:
        return "added" if self.before is MISSING else "removed" if self.after is MISSING else "changed"

    def to_json(self) -> dict:
        """``{"path", "op": added|removed|changed, "before", "after"}`` (null on the absent side)."""
        return {"path": self.path, "op": self.op, "before": None if self.before is MISSING else self.before,
                "after": None if self.after is MISSING else self.after}

    def text(self) -> str:
        """``retry.max_attempts 3 → 5`` / ``+ retry.max_delay "10s"`` / ``- when "…"``."""
        if self.op == "added":
            return f"+ {self.path} {fmt(self.after)}"
        if self.op == "removed":
            return f"- {self.path} {fmt(self.before)}"
        return f"{self.path} {fmt(self.before)} → {fmt(self.after)}"


def fmt(value) -> str:
    """A value as compact JSON (strings quoted) for one-line display."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def field_changes(before, after, path: str = "", skip=()) -> list[FieldChange]:
    """Every differing leaf of two JSON-like values; top-level keys in ``skip`` are ignored."""
    out: list[FieldChange] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key in _keys(before, after):
            if key not in skip:
                _walk(before.get(key, MISSING), after.get(key, MISSING), _join(path, key), str(key), out)
    else:
        _walk(before, after, path, "", out)
    return out


def _keys(a: dict, b: dict) -> list:
    return list(a) + [k for k in b if k not in a]


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _same(a, b, key: str) -> bool:
    if a == b and isinstance(a, bool) == isinstance(b, bool):
        return True
    if key in DURATION_KEYS and isinstance(a, str) and isinstance(b, str):
        try:
            return parse_duration(a) == parse_duration(b)
        except ValueError:
            return False
    return False


def _walk(b, a, path: str, key: str, out: list) -> None:
    if b is MISSING or a is MISSING:
        if not (b is MISSING and a is MISSING):
            out.append(FieldChange(path, b, a))
        return
    if _same(b, a, key):
        return
    if isinstance(b, dict) and isinstance(a, dict):
        for k in _keys(b, a):
            _walk(b.get(k, MISSING), a.get(k, MISSING), _join(path, k), str(k), out)
        return
    if isinstance(b, list) and isinstance(a, list) and key in KEYED_LISTS:
        if _walk_keyed(b, a, path, key, out):
            return
    out.append(FieldChange(path, b, a))


def _walk_keyed(b: list, a: list, path: str, key: str, out: list) -> bool:
    """Match rule lists by key; False when the items are not keyable (then compared whole)."""
    key_of, collapse = KEYED_LISTS[key]
    if not all(isinstance(i, dict) for i in b + a):
        return False
    if collapse and len(b) == 1 and len(a) == 1:
        for k in _keys(b[0], a[0]):
            _walk(b[0].get(k, MISSING), a[0].get(k, MISSING), _join(path, k), str(k), out)
        return True
    kb = [key_of(i) for i in b]
    ka = [key_of(i) for i in a]
    if len(set(kb)) != len(kb) or len(set(ka)) != len(ka):
        return False
    before, after = dict(zip(kb, b)), dict(zip(ka, a))
    for k in _keys(before, after):
        _walk(before.get(k, MISSING), after.get(k, MISSING), f"{path}[{k}]", "", out)
    common_b = [k for k in kb if k in after]
    common_a = [k for k in ka if k in before]
    if common_b != common_a:
        out.append(FieldChange(f"{path}.order", common_b, common_a))
    return True


# ----------------------------------------------------------------------------- risks
@dataclass(frozen=True)
class Risk:
    """A flagged risk: ``code`` is one of side_effect_added, undo_removed, compensation_dropped,
    contract_edited_in_place, policy_added, policy_loosened; ``message`` says what, in one line."""

    code: str
    message: str

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message}


def contract_risks(before: dict | None, after: dict, ref: str, same_version: bool = False) -> list[Risk]:
    """Risks of a contract going from ``before`` (None: new) to ``after`` (raw file data)."""
    out = []
    old_effects = {KEYED_LISTS["side_effects"][0](e) for e in (before or {}).get("side_effects") or () if isinstance(e, dict)}
    for effect in after.get("side_effects") or ():
        if isinstance(effect, dict) and KEYED_LISTS["side_effects"][0](effect) not in old_effects:
            what = f"{effect.get('type')} → {effect.get('target')}"
            if effect.get("effect"):
                what += f" ({effect['effect']})"
            out.append(Risk("side_effect_added", f"{ref}: new side effect {what}"))
    if before:
        for key in ("verify", "compensate"):
            had = before.get(key) not in (None, "none")
            has = after.get(key) not in (None, "none")
            if had and not has:
                out.append(Risk("undo_removed", f"{ref}: {key} {before[key]} removed ({after.get(key) or 'none'} now)"))
        if same_version and before != after:
            out.append(Risk("contract_edited_in_place",
                            f"{ref} changed without a version bump; states pinned to it get new behaviour"))
    return out


def compensation_risks(before: dict | None, after: dict | None, where: str) -> list[Risk]:
    """A handler or ``fail`` state (raw data; None: absent) that said ``compensate: true`` and no
    longer does: a run that fails there now keeps its completed side effects."""
    if not isinstance(before, dict) or before.get("compensate") is not True:
        return []
    if not isinstance(after, dict) or after.get("compensate") is True:
        return []  # a removed handler hands the error on to the next layer, which has its own say
    now = fmt(after.get("compensate", False))
    return [Risk("compensation_dropped", f"{where}: compensate true → {now}; a run failing here keeps its side effects")]


def policy_risks(before: dict | None, after: dict | None, name: str) -> list[Risk]:
    """Risks of a policy going from ``before`` to ``after`` (raw data; None: absent). A new policy
    allows what was denied by default; a removed one only denies more, so it is no risk."""
    if after is None:
        return []
    if before is None:
        tools = ", ".join(str(t) for t in after.get("applies_to") or ())
        return [Risk("policy_added", f"policy {name} now allows side effects of {tools} when its checks hold")]
    return [Risk("policy_loosened", f"policy {name}: {m}") for m in _loosened(before, after)]


def _loosened(b: dict, a: dict) -> list[str]:
    out = []
    new_tools = [t for t in a.get("applies_to") or () if t not in (b.get("applies_to") or ())]
    if new_tools:
        out.append(f"now applies to {', '.join(map(str, new_tools))} (allowed when the checks hold)")
    checks_b = {str(c.get("field")): c for c in b.get("allow") or () if isinstance(c, dict)}
    checks_a = {str(c.get("field")): c for c in a.get("allow") or () if isinstance(c, dict)}
    for field_name, old in checks_b.items():
        new = checks_a.get(field_name)
        if new is None:
            out.append(f"check on {field_name} removed")
        elif new != old:
            out.extend(_check_loosened(field_name, old, new))
    out.extend(_limits_loosened(b, a))
    if b.get("review_when") and not a.get("review_when"):
        out.append(f"review_when {fmt(b['review_when'])} removed")
    elif b.get("review_when") and a.get("review_when") != b.get("review_when"):
        out.append(f"review_when changed (may allow more without review): {fmt(b['review_when'])} → {fmt(a['review_when'])}")
    return out


#: how hard a check's failure stops a call: a change down this scale lets more through
EFFECT_STRENGTH = {"deny": 2, "review": 1, "warn": 0}


def _check_loosened(field_name: str, old: dict, new: dict) -> list[str]:
    softened = []
    e_old, e_new = old.get("effect", "deny"), new.get("effect", "deny")
    if EFFECT_STRENGTH.get(e_new, 2) < EFFECT_STRENGTH.get(e_old, 2):
        what = {"warn": "only warns", "review": "asks a human"}[e_new]
        softened.append(f"check on {field_name} now {what} where it used to {e_old} (effect {e_old} → {e_new})")
    ops = ("equals", "in", "all_in", "range", "regex")
    op_old = next((o for o in ops if o in old), None)
    op_new = next((o for o in ops if o in new), None)
    if op_old != op_new:
        return softened + [f"check on {field_name} changed from {op_old} to {op_new} (may allow more)"]
    return softened + _value_loosened(field_name, op_old, old[op_old], new[op_new])


def _value_loosened(field_name: str, op_old: str, vo, vn) -> list[str]:
    if op_old in ("in", "all_in"):
        if not (isinstance(vn, list) and isinstance(vo, list)):  # an {expr: …} list on either side
            return [f"{field_name} {op_old} changed (may allow more): {fmt(vo)} → {fmt(vn)}"] if vo != vn else []
        added = [v for v in vn if v not in vo]
        return [f"{field_name} now also allows {fmt(added)}"] if added else []
    if op_old == "range":
        lo_o, hi_o = (list(vo) + [None, None])[:2]
        lo_n, hi_n = (list(vn) + [None, None])[:2]
        wider = (lo_n is None and lo_o is not None) or (hi_n is None and hi_o is not None) \
            or (lo_n is not None and lo_o is not None and lo_n < lo_o) \
            or (hi_n is not None and hi_o is not None and hi_n > hi_o)
        return [f"{field_name} range widened {fmt(vo)} → {fmt(vn)}"] if wider else []
    if op_old == "equals":
        return [f"{field_name} now allows {fmt(vn)} instead of {fmt(vo)}"]
    return [f"{field_name} regex changed (may allow more): {fmt(vo)} → {fmt(vn)}"]


def _limits_loosened(b: dict, a: dict) -> list[str]:
    out = []
    rb, ra = b.get("rate"), a.get("rate")
    if rb and not ra:
        out.append("rate limit removed")
    elif rb and ra:
        if (ra.get("max") or 0) > (rb.get("max") or 0):
            out.append(f"rate max raised {rb.get('max')} → {ra.get('max')}")
        if _seconds(ra.get("window")) < _seconds(rb.get("window")):
            out.append(f"rate window shortened {rb.get('window')} → {ra.get('window')}")
        if ra.get("per", "flow") != rb.get("per", "flow"):
            out.append(f"rate counted per {ra.get('per', 'flow')} instead of per {rb.get('per', 'flow')} (may allow more)")
    db, da = b.get("dedupe"), a.get("dedupe")
    if db and not da:
        out.append("dedupe removed")
    elif db and da and _seconds(da.get("window")) < _seconds(db.get("window")):
        out.append(f"dedupe window shortened {db.get('window')} → {da.get('window')}")
    return out


def _seconds(value) -> float:
    try:
        return parse_duration(value)
    except ValueError:
        return 0.0
