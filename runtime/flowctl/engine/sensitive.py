"""Secrets never reach the store in plaintext: redaction by name *and by value*, and the sealed row.

A run is *sensitive* when its flow, a flow it starts (parallel/map/subflow, at any depth), or the
run that started it uses a contract with ``sensitive`` fields. For such a run, :class:`Secrets`
keeps the field names and every value seen under one of them — in the run input and params, a
tool's input or output, a review decision's data, a child run's secrets — and redacts:

* by name: a key named in a contract's ``sensitive`` list (plain names at any depth, dotted paths
  from the top) has its value replaced by ``***redacted***``;
* by value: a known value is replaced wherever it appears in what is stored — whole values of any
  type (a number too), and inside longer text (exception messages, schema and policy reasons,
  condition results, review ``show`` data under another name, dict keys) for values of at least
  :data:`MIN_INSIDE` characters, and shorter text values where they are quoted; each value's escaped forms (:func:`text_forms`: JSON ``\\u``
  escapes, ``repr``, ``ascii``, ``unicode_escape``, its UTF-8 bytes' ``repr``) are matched too.

What is stored for a sensitive run: audit events redacted (engine fields such as ``to`` stay
readable); idempotency keys as a keyed digest (:meth:`Secrets.digest`), as are the gate's input digests
(:func:`flowctl.engine.gatecall.call_digest`); the steps table's input,
output and keys redacted; ``raw`` (the tool's raw output text) kept only for a tool whose contract
has no sensitive fields and whose output holds no known value; the run row's ``input``,
``params`` and ``cursor`` — which the live run needs in plaintext — sealed with AES-GCM
(:mod:`flowctl.store.keyring`) until the run ends, then replaced by their redacted form. A child run's
cursor and output stay sealed after it ends (its parent reads its output and takes over its saga)
until the parent ends. The values themselves live in the sealed cursor (``cursor.secrets``) so a
resumed run redacts what it redacted before.

What it does not do: a value first seen in plaintext under a name no contract marks sensitive,
before it was seen under a sensitive one, stays where it was already recorded (the audit log is
append-only); a transformed value (masked, hashed, encoded, split) is not recognised; values
shorter than :data:`MIN_INSIDE` characters (a PIN, a CVV) are redacted where they are a whole value
and, inside text, only where they are quoted as messages quote a value (``'123'``, ``"123"``:
schema and policy reasons do); a short number inside text stays (``123 is greater than …``).
"""
from __future__ import annotations

import json
import math
import re

from flowctl.engine.flowfiles import flow_files, started_flows
from flowctl.errors import FlowctlError
from flowctl.store.audit import REDACTED, encode_data, row_identity, run_seal
from flowctl.store.keyring import Sealed
from flowctl.store.sql import FINAL

#: Values at least this long are also redacted inside longer text; shorter ones only when whole.
MIN_INSIDE = 4
_CLEAN_KEPT = 4096
#: Event fields written by the engine from the definition (never run data): left as they are.
ENGINE_KEYS = frozenset({"to", "line", "tool", "flow", "flow_version", "digest", "git_commit", "type", "step",
                         "visit", "purpose", "layer", "handler", "owner", "previous_owner", "policy", "rule"})


def _scalar(v) -> bool:
    """A value redaction by value can know: text, or a finite number (not a boolean)."""
    if isinstance(v, str):
        return v != ""
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))


_JSON_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")


def text_forms(v: str) -> tuple:
    """The forms a text value ``v`` can take inside a message, ``v`` first: as written, JSON-escaped
    (``\\u00e4``, also with upper-case hex, and unescaped non-ASCII), ``repr`` and ``ascii`` (``\\xe4``,
    ``\\u20ac``, ``\\U0001f600``), ``unicode_escape`` and the ``repr`` of its UTF-8 bytes
    (``\\xc3\\xa4``); each without its quotes, each once."""
    as_json = json.dumps(v)[1:-1]
    forms = (v, as_json, _JSON_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), as_json),
             json.dumps(v, ensure_ascii=False)[1:-1], repr(v)[1:-1], ascii(v)[1:-1],
             v.encode("unicode_escape").decode("ascii"), repr(v.encode("utf-8", "surrogatepass"))[2:-1])
    return tuple(dict.fromkeys(forms))


class Secrets:
    """Sensitive field names of one run and the values seen under them (see the module docstring).

    ``fields``: names (``card_number``) or dotted paths (``card.number``). ``values``: known
    values (str or number). ``keyring``: the store's :class:`~flowctl.store.keyring.Keyring`, or None
    (in-memory store: nothing to seal, digests unkeyed)."""

    def __init__(self, fields, values=(), keyring=None):
        self.keyring = keyring
        self.fields: frozenset = frozenset()
        self.plain: frozenset = frozenset()
        self.dotted: tuple = ()
        self.values: list = []
        self._exact: set = set()     # whole strings to redact
        self._numbers: set = set()   # whole numbers to redact
        self._needles: set = set()   # substrings to redact inside longer text
        self._pattern = None
        self._shortest = 1 << 30     # length of the shortest substring to look for
        self._clean: set = set()     # texts known to hold no value (bounded; emptied when one is added)
        self._digests: dict = {}
        self.changed = False         # values or fields added since the cursor last kept them
        self.add_fields(fields)
        for v in values:
            self.add(v)
        self.changed = False

    # ------------------------------------------------------------------ learning
    def add_fields(self, fields) -> None:
        new = frozenset(fields) - self.fields
        if new:
            self.fields |= new
            self.plain = frozenset(f for f in self.fields if "." not in f)
            self.dotted = tuple(tuple(f.split(".")) for f in self.fields if "." in f)
            self.changed = True

    def add(self, v) -> None:
        """Know ``v`` (a string or number; anything else is ignored) as a secret value."""
        if not _scalar(v) or v in self._exact or (not isinstance(v, str) and v in self._numbers):
            return
        self.values.append(v)
        self.changed = True
        if isinstance(v, str):
            self._exact.add(v)
            if v.isascii() and v.isdigit() and len(v) <= 40:
                self._numbers.add(int(v))
            forms = text_forms(v)
        else:
            self._numbers.add(v)
            text = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
            self._exact.add(text)
            forms = (text, repr(v))
        for form in forms:
            if len(form) >= MIN_INSIDE:
                self._needles.add(form)
                self._shortest = min(self._shortest, len(form))
        if isinstance(v, str) and len(v) < MIN_INSIDE:  # a PIN or CVV: inside text only where quoted
            for form in {repr(v), json.dumps(v), json.dumps(v, ensure_ascii=False)}:
                self._needles.add(form)
                self._shortest = min(self._shortest, len(form))
        self._pattern = None
        self._clean.clear()

    def learn(self, value, path=()) -> None:
        """Know every value found under a sensitive name in ``value`` (any depth)."""
        if isinstance(value, dict):
            for k, item in value.items():
                p = path + (k,)
                if k in self.plain or p in self.dotted:
                    self._learn_all(item)
                elif isinstance(item, (dict, list)):
                    self.learn(item, p)
        elif isinstance(value, list):
            for item in value:
                self.learn(item, path)

    def _learn_all(self, value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                self._learn_all(item)
        elif isinstance(value, list):
            for item in value:
                self._learn_all(item)
        else:
            self.add(value)

    def absorb(self, kept) -> None:
        """Take in a cursor's ``secrets`` (``{fields, values}``), e.g. a child run's."""
        if isinstance(kept, dict):
            self.add_fields(kept.get("fields") or ())
            for v in kept.get("values") or ():
                self.add(v)

    def kept(self) -> dict:
        """What the (sealed) cursor keeps: ``{fields, values}``."""
        return {"fields": sorted(self.fields), "values": list(self.values)}

    # ------------------------------------------------------------------ redacting
    def _compiled(self):
        if self._pattern is None and self._needles:
            self._pattern = re.compile("|".join(re.escape(n) for n in sorted(self._needles, key=len, reverse=True)))
        return self._pattern

    def text(self, s: str) -> str:
        """``s`` with every known value replaced (the same object when none is in it)."""
        if s in self._exact:
            return REDACTED
        if len(s) < self._shortest or s in self._clean:  # engine texts recur every step: looked at once
            return s
        pattern = self._compiled()
        if pattern.search(s):
            return pattern.sub(REDACTED, s)
        if len(self._clean) >= _CLEAN_KEPT:
            self._clean.clear()
        self._clean.add(s)
        return s

    def scrub(self, value, path=()):
        """``value`` redacted by name and by value; the same object when nothing changed."""
        if isinstance(value, str):
            return self.text(value) if self._exact else value
        if isinstance(value, dict):
            out = None
            numbers, dotted = self._numbers, self.dotted
            for k, item in value.items():
                p = path + (k,) if dotted else path
                if k in self.plain or (dotted and p in dotted):
                    new, key = REDACTED, k
                else:
                    kind = item.__class__
                    if kind is bool or item is None:  # leaves inline: no call per number or flag
                        new = item
                    elif kind is int or kind is float:
                        new = REDACTED if item in numbers else item
                    else:
                        new = self.scrub(item, p)
                    key = self.text(k) if k.__class__ is str and self._exact else k
                if out is None and (new is not item or key is not k):
                    out = {}
                    for k2, v2 in value.items():  # the keys before this one, as they were
                        if k2 is k:
                            break
                        out[k2] = v2
                if out is not None:
                    out[key] = new
            return value if out is None else out
        if isinstance(value, list):
            out = None
            for i, item in enumerate(value):
                new = self.scrub(item, path)
                if out is None and new is not item:
                    out = list(value[:i])
                if out is not None:
                    out.append(new)
            return value if out is None else out
        if value.__class__ in (int, float) and value in self._numbers:
            return REDACTED
        return value

    def event(self, data: dict) -> dict:
        """An event's data as stored: run data redacted, engine fields kept, idempotency keys as
        digests, ``raw`` dropped when its output was redacted or it holds a known value."""
        raw_ok = True
        for key, value in data.items():
            if key in ENGINE_KEYS or value is None or key == "raw":
                continue
            if key == "idempotency_key":
                if isinstance(value, str) and not value.startswith(("hmac:", "sha256:")):
                    data[key] = self.digest(value)
                continue
            new = self.scrub(value)
            if new is not value:
                data[key] = new
                raw_ok = raw_ok and key != "output"
        raw = data.get("raw")
        if isinstance(raw, str) and (not raw_ok or self.text(raw) is not raw):
            data["raw"] = None
        return data

    def digest(self, key: str) -> str:
        """How an idempotency key is stored: keyed by the store's key when there is one."""
        found = self._digests.get(key)
        if found is None:
            if self.keyring is not None:
                found = self.keyring.digest(key)
            else:
                import hashlib

                found = "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
            if len(self._digests) >= 64:  # a step's key is digested for its events and its step rows
                self._digests.clear()
            self._digests[key] = found
        return found

    def step(self, row: dict) -> dict:
        """A steps-table row as stored."""
        out = dict(row)
        for key in ("input", "output"):
            if out.get(key) is not None:
                out[key] = self.scrub(out[key])
        if isinstance(out.get("idempotency_key"), str):
            out["idempotency_key"] = self.digest(out["idempotency_key"])
        return out


# ------------------------------------------------------------------------- a run's secrets
def for_run(ctx, inherited=None):
    """The :class:`Secrets` of the run of ``ctx`` (a :class:`~flowctl.engine.context.RunContext`),
    or None when it is not sensitive. ``inherited``: the parent's ``{fields, values}`` (a child run
    starting). Raises
    :class:`~flowctl.errors.SecretKeyError` when the store needs a key it cannot have."""
    kept = ctx.cursor.secrets
    if not ctx.sensitive and not kept and not inherited:
        return None
    keyring = getattr(ctx.store, "keyring", None)
    s = Secrets(ctx.sensitive, (), keyring() if keyring is not None else None)
    s.absorb(inherited)
    s.absorb(kept)
    s.learn(ctx.row.get("input"))
    s.learn(ctx.row.get("params"))
    if kept is None:
        s.changed = True
    return s


def _seal(s: Secrets, run_id: str, column: str, value):
    if s.keyring is None or value is None:
        return value
    sealed = Sealed(s.keyring.seal(encode_data(value), f"{run_id}/{column}"))
    sealed.plain = value
    return sealed


def new_row(ctx, row: dict) -> dict:
    """The first row of a sensitive run as the store keeps it: input, params and cursor sealed."""
    s = ctx.secrets
    ctx.cursor.secrets = s.kept()
    s.changed = False
    out = dict(row, cursor=ctx.cursor.to_json())
    for column in ("input", "params", "cursor"):
        out[column] = _seal(s, row["id"], column, out.get(column))
    return out


def protect(ctx, run: dict, steps: list, status) -> tuple:
    """``(run, steps)`` of one commit as the store keeps them (see the module docstring)."""
    s = ctx.secrets
    if s.changed:
        ctx.cursor.secrets = s.kept()
        s.changed = False
    cursor = ctx.cursor.to_json()
    steps = [s.step(row) for row in steps]
    out = dict(run)
    if out.get("error") is not None:
        out["error"] = s.scrub(out["error"])
    if status in FINAL and not _parent_live(ctx):  # the run ended: no plaintext is needed any more
        out["cursor"] = s.scrub({k: v for k, v in cursor.items() if k != "secrets"})
        out["input"] = s.scrub(ctx.row.get("input"))
        out["params"] = s.scrub(ctx.row.get("params"))
        if "output" in out:
            out["output"] = s.scrub(out["output"])
        return out, steps
    out["cursor"] = _seal(s, ctx.id, "cursor", cursor)
    if "output" in out:  # a child run: its parent reads the output, then drops it (drop_children)
        out["output"] = _seal(s, ctx.id, "output", out["output"])
    return out, steps


def _parent_live(ctx) -> bool:
    """A child run whose parent has not ended: the parent still reads its output and saga."""
    parent_id = ctx.row.get("parent_id")
    if not parent_id:
        return False
    try:
        return ctx.store.get_run(parent_id, exact=True)["status"] not in FINAL
    except FlowctlError:
        return False  # no parent to keep anything for


def drop_children(ctx) -> None:
    """the run of ``ctx`` (a :class:`~flowctl.engine.context.RunContext`) ended: its finished child runs, kept sealed for it, are redacted for good."""
    store = ctx.store
    for child in store.list_runs(parent_id=ctx.id, limit=0):
        kept = (child.get("cursor") or {}).get("secrets")
        if child["status"] not in FINAL or not kept:
            continue
        s = Secrets(kept.get("fields") or (), kept.get("values") or ())
        cursor = s.scrub({k: v for k, v in child["cursor"].items() if k != "secrets"})
        fields = {"input": s.scrub(child.get("input")), "params": s.scrub(child.get("params")),
                  "cursor": cursor, "output": s.scrub(child.get("output"))}
        if child.get("seal"):  # the redacted checkpoint is what the row holds now: sealed again (audit.run_seal)
            fields["seal"] = run_seal(child["id"], child["last_seq"], child["last_hash"], child["status"],
                                      child.get("error"), encode_data(cursor), row_identity(dict(child, **fields)))
        store.drop_secrets(child["id"], child["last_seq"], fields)


def flow_fields(project, flow) -> frozenset:
    """Every field name marked ``sensitive`` by a contract that ``flow`` or a flow it starts (at
    any depth) uses; cached on the project."""
    key = ("sensitive", flow.id)
    found = project._resolved.get(key)
    if found is None and getattr(flow, "every_contract", False):  # a session (flowctl.engine.adhoc): any contract
        found = project._resolved[key] = frozenset(f for versions_ in project.contracts.values() for c in versions_
                                                   for f in c.sensitive)
    if found is None:
        reach, todo = {flow.id}, [flow]
        while todo:
            for child in started_flows(project, todo.pop()):
                if child not in reach:
                    reach.add(child)
                    todo.append(project.flows[child])
        files = set()
        for fid in reach:
            files |= flow_files(project, project.flows[fid])
        found = frozenset(f for versions_ in project.contracts.values() for c in versions_
                          if c.file in files for f in c.sensitive)
        project._resolved[key] = found
    return found
