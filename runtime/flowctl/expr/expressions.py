"""JMESPath as flowctl uses it: compiled once, extra functions, lint of common mistakes.

:func:`compile_expr` returns an :class:`Expression` whose ``evaluate(scope)`` runs the parsed
tree with one shared interpreter (no per-call set-up). Evaluation errors (``5 < '10'``, a
function given the wrong type) raise :class:`~flowctl.errors.ExpressionError` naming the
expression and where it was written.

Extra functions, besides the JMESPath built-ins:

=========================  ===============================================================
``to_json(x)``             JSON text of ``x`` (keys sorted)
``from_json(s)``           the value encoded by JSON text ``s``
``uuid()``                 a random UUID4 string — recorded, so a replay sees the same value
``now()``                  the current UTC time, ISO 8601 — recorded likewise
``add/subtract/multiply/divide(a, b)``   arithmetic on numbers (``divide`` by 0 is an error)
``glob(s, pattern)``       shell-style match (``fnmatch``), case-sensitive
``has(obj, key)``          ``key`` present in ``obj`` (true even when its value is null)
``to_epoch(iso)``          seconds since 1970 of an ISO-8601 time (naive = UTC)
``date_add(iso, dur)``     ISO-8601 time plus a duration (``"90s"``, ``"1h"``)
=========================  ===============================================================

No function gives a non-finite number: a result that would be infinite or NaN (``divide(`1`,
`1e-320`)``, ``multiply`` overflowing, ``to_number('Infinity')``, ``sum`` of huge numbers,
``from_json('NaN')``) raises :class:`~flowctl.errors.ExpressionError` instead, so error handlers
apply and nothing non-finite reaches events, outputs or the run row (JSON has no Infinity).

``uuid()`` and ``now()`` draw from :data:`RECORDER`, a context variable the engine sets per step
so values are recorded in the audit log and replayed from it.
"""
from __future__ import annotations

import contextvars
import fnmatch
import json
import math
import re
from datetime import datetime, timedelta, timezone

import jmespath
from jmespath import exceptions as jexc
from jmespath import functions, lexer, visitor

from flowctl.definition.durations import parse_duration
from flowctl.errors import ExpressionError
from flowctl.expr.compile import compile_tree


class Recorder:
    """Source of ``uuid()``/``now()`` values. The default draws fresh values and records them."""

    def __init__(self, clock=None, replay: list | None = None):
        self.clock = clock
        self.recorded: list = []
        self._replay = list(replay or ())

    def draw(self, kind: str, make):
        if self._replay:
            entry = self._replay.pop(0)
            if entry.get("kind") == kind:
                self.recorded.append(entry)
                return entry["value"]
        value = make()
        self.recorded.append({"kind": kind, "value": value})
        return value

    def now_iso(self) -> str:
        t = self.clock.now() if self.clock else datetime.now(timezone.utc)
        return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


RECORDER: contextvars.ContextVar = contextvars.ContextVar("flowctl_recorder", default=None)


def _parse_time(text: str) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an ISO-8601 time")
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


class NonFinite(ValueError):
    """A function's result is infinite or NaN (reported as an :class:`ExpressionError`)."""


def _reject_constant(name):
    raise NonFinite(f"from_json: {name} is not a finite number")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise NonFinite(f"from_json: {text} is not a finite number")
    return value


class _Functions(functions.Functions):
    def call_function(self, function_name, resolved_args):
        """As JMESPath's, but a float result must be finite (see the module docstring)."""
        out = super().call_function(function_name, resolved_args)
        if isinstance(out, float) and not math.isfinite(out):
            raise NonFinite(f"{function_name}() gives {out!r}, not a finite number")
        return out

    @functions.signature({"types": []})
    def _func_to_json(self, value):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @functions.signature({"types": ["string"]})
    def _func_from_json(self, text):
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)

    @functions.signature()
    def _func_uuid(self):
        rec = RECORDER.get()
        import uuid

        make = lambda: str(uuid.uuid4())  # noqa: E731
        return rec.draw("uuid", make) if rec else make()

    @functions.signature()
    def _func_now(self):
        rec = RECORDER.get() or Recorder()
        return rec.draw("now", rec.now_iso)

    @functions.signature({"types": ["number"]}, {"types": ["number"]})
    def _func_add(self, a, b):
        return a + b

    @functions.signature({"types": ["number"]}, {"types": ["number"]})
    def _func_subtract(self, a, b):
        return a - b

    @functions.signature({"types": ["number"]}, {"types": ["number"]})
    def _func_multiply(self, a, b):
        return a * b

    @functions.signature({"types": ["number"]}, {"types": ["number"]})
    def _func_divide(self, a, b):
        return a / b

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_glob(self, text, pattern):
        return fnmatch.fnmatchcase(text, pattern)

    @functions.signature({"types": ["object"]}, {"types": ["string"]})
    def _func_has(self, obj, key):
        return key in obj

    @functions.signature({"types": ["string"]})
    def _func_to_epoch(self, text):
        return _parse_time(text).timestamp()

    @functions.signature({"types": ["string"]}, {"types": ["string", "number"]})
    def _func_date_add(self, text, duration):
        seconds = float(duration) if isinstance(duration, (int, float)) else parse_duration(duration)
        out = _parse_time(text) + timedelta(seconds=seconds)
        return out.isoformat().replace("+00:00", "Z")


_OPTIONS = jmespath.Options(custom_functions=_Functions())
_INTERPRETER = visitor.TreeInterpreter(_OPTIONS)
_KNOWN_FUNCTIONS = frozenset(name[6:] for name in dir(_Functions) if name.startswith("_func_"))


class Expression:
    """A compiled expression. ``text`` is the source; ``where`` is ``file:line`` (may be empty)."""

    __slots__ = ("text", "where", "_tree", "_fn", "cannot_fail")

    def __init__(self, text: str, where: str = ""):
        self.text = text
        self.where = where
        self._tree = tree = jmespath.compile(text).parsed
        try:
            self._fn = compile_tree(tree, _INTERPRETER.visit, _OPTIONS.custom_functions)
        except RecursionError:  # nested too deeply to compile here: jmespath's own tree walk
            self._fn = lambda scope: _INTERPRETER.visit(tree, scope)
        #: a field path or a literal: evaluating it cannot raise, so callers may use :attr:`unchecked`
        self.cannot_fail = _cannot_fail(self._tree)

    @property
    def unchecked(self):
        """The compiled closure itself, ``fn(scope)``, without the error wrapping of :meth:`evaluate`
        (for expressions that :attr:`cannot_fail`)."""
        return self._fn

    def evaluate(self, scope: dict):
        """Value of the expression on ``scope`` (compiled to closures, same results as jmespath's
        interpreter: :mod:`flowctl.expr.compile`). Raises :class:`ExpressionError`."""
        try:
            return self._fn(scope)
        except (jexc.JMESPathError, ValueError, TypeError, ZeroDivisionError, OverflowError, KeyError) as exc:
            where = f" at {self.where}" if self.where else ""
            raise ExpressionError(f"expression {self.text!r}{where} failed: {exc}") from None

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


def _cannot_fail(node) -> bool:
    kind = node["type"]
    if kind in ("field", "literal", "current", "identity"):
        return True
    return kind == "subexpression" and all(_cannot_fail(c) for c in node["children"])


_CACHE: dict = {}


def compile_expr(text: str, where: str = "") -> Expression:
    """Compile (cached by text and location). Raises ``jmespath.exceptions.ParseError`` on syntax."""
    key = (text, where)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = Expression(text, where)
    return found


# --------------------------------------------------------------------------------------- lint
_LINT_CACHE: dict = {}
_SYNTAX_HINT = "JMESPath syntax: https://jmespath.org/specification.html"


def lint(text: str, names: tuple | None = None, suggest: tuple | None = None) -> list[tuple[str, int, str, str]]:
    """Problems in one expression's source: ``[(code, offset, message, hint)]``.

    ``offset`` is the 0-based character position inside ``text``. Codes: FC401 syntax,
    FC402 a double-quoted "literal" (JMESPath reads it as a field name), FC403 a backtick
    literal that is not JSON, FC404 an unknown function, FC406 (when ``names`` is given: the
    fields the scope has) a path starting with another name, which is always null — a typo such
    as ``respons.total``, or a bare ``true``/``false``; FC407 a bare ``null`` (a warning: it is
    null, as meant); FC408 nesting deeper than :data:`MAX_NESTING` (it could not run).
    ``suggest``: the names FC406's "did you mean" may offer (default ``names``: those that hold a
    value at that place). Results are cached per text and names.
    """
    key = (text, names, suggest)
    found = _LINT_CACHE.get(key)
    if found is None:
        found = _lint(text)
        if names is not None and not found:
            found = _unknown_names(text, names, names if suggest is None else suggest)
        elif names is not None:
            found = _unscoped_quoted(text, found, names)
        if len(_LINT_CACHE) < 100_000:
            _LINT_CACHE[key] = found
    return list(found)


#: Nesting (of the parsed tree, or of brackets in the text) past which an expression is refused:
#: evaluation recurses once per level, so 10,000 pipes would end in RecursionError at run time.
MAX_NESTING = 120

_BARE = {
    "true": ("FC406", "`true` without backticks is a field name in JMESPath (always null), not the boolean",
             "write `true` (in backticks)"),
    "false": ("FC406", "`false` without backticks is a field name in JMESPath (always null), not the boolean",
              "write `false` (in backticks)"),
    "null": ("FC407", "bare null is a field name in JMESPath; no field is called null, so it is null as meant",
             "write `null` (in backticks) to say so"),
}


_TREES: dict = {}


def parsed(text: str) -> dict:
    """jmespath's parsed tree of ``text``, cached (lint and :mod:`flowctl.check.dataflow` share it).
    Raises as ``jmespath.compile`` does."""
    tree = _TREES.get(text)
    if tree is None:
        tree = jmespath.compile(text).parsed
        if len(_TREES) < 200_000:
            _TREES[text] = tree
    return tree


_ROOTS: dict = {}


def root_names(text: str, tree) -> list:
    """:func:`_root_fields` of ``text``'s ``tree``, cached per text (lint and the data-flow share it)."""
    found = _ROOTS.get(text)
    if found is None:
        found = _root_fields(tree)
        if len(_ROOTS) < 200_000:
            _ROOTS[text] = found
    return found


def _unscoped_quoted(text: str, found: list, names: tuple) -> list:
    """``found`` with each FC402 (a double-quoted "literal" beside a comparison) whose name is read
    from the scope itself and is not in it made an FC406 error: it is always null, so the
    comparison never holds (``review.decision == "approve"`` sends every approval down the other
    branch; new-user finding), not a style warning."""
    if not any(p[0] == "FC402" for p in found):
        return found
    try:
        roots = set(root_names(text, parsed(text)))
    except Exception:  # noqa: BLE001 - no tree: the syntax problems stand as they are
        return found
    out = []
    for code, offset, message, hint in found:
        name = message[1:message.find('" is a field name')] if code == "FC402" else None
        if name is not None and name in roots and name not in names:
            code, message = "FC406", f'{message}: no field "{name}" is in the scope of this expression, so it is always null'
        out.append((code, offset, message, hint))
    return out


def _unknown_names(text: str, names: tuple, suggest: tuple) -> list:
    tree = parsed(text)
    problems = []
    compared = _compared_words(tree)
    for name in root_names(text, tree):
        if name in names:
            continue
        if name in _BARE:
            code, message, hint = _BARE[name]
            problems.append((code, _identifier_offset(text, name), message, hint))
            continue
        import difflib

        close = difflib.get_close_matches(name, suggest, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "an expression starts from one of: " + ", ".join(suggest)
        if text.strip() == name and not close:  # the whole expression one bare word: text meant, YAML took its quotes
            hint = (f"a bare word is a field name in JMESPath: for the text write '{name}'; in YAML inside double "
                    f"quotes, \"'{name}'\" (YAML takes a single pair of quotes off)")
        if name in compared:
            hint = (f"a bare word is a field name in JMESPath: write '{name}' (in single quotes) for the "
                    f"string" + (f"; or did you mean '{close[0]}'?" if close else ""))
        offset = _identifier_offset(text, name)
        problems.append(("FC406", offset, f"'{name}' is not in the scope of this expression, so it is always null",
                         hint))
    return problems


#: string functions whose second argument is most often a literal string (``contains(x, 'a')``)
_SEARCHED = frozenset({"contains", "starts_with", "ends_with"})


def _compared_words(tree) -> set:
    """Bare field names that most likely mean a string: a whole side of a ``==``/``!=`` (``team``
    in ``input.plan == team``), the searched-for argument of ``contains``/``starts_with``/
    ``ends_with`` (``urgent`` in ``contains(input.tags, urgent)``) and an element of a list written
    out (``gold`` in ``contains([gold, silver], input.plan)``)."""
    found, stack = set(), [tree]

    def bare(nodes):
        return (c["value"] for c in nodes if isinstance(c, dict) and c.get("type") == "field")

    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        children = n.get("children") or []
        kind = n.get("type")
        if kind == "comparator" and n.get("value") in ("eq", "ne"):
            found.update(bare(children))
        elif kind == "function_expression" and n.get("value") in _SEARCHED and len(children) == 2:
            found.update(bare(children[1:]))
        elif kind == "multi_select_list" and len(children) > 1:
            found.update(bare(children))
        stack.extend(children)
    return found


def _root_fields(node) -> list:
    """Field names read from the scope itself (not from a value inside it): ``respons`` in
    ``respons.total``, ``a`` and ``b`` in ``a || b``, not ``x`` in ``items[?x > `1`]``."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        kind, children = n.get("type"), n.get("children") or []
        if kind == "field":
            found.append(n["value"])
        elif kind in ("subexpression", "index_expression", "pipe", "projection", "value_projection",
                      "filter_projection", "flatten"):
            if children:
                stack.append(children[0])  # the rest is evaluated on what the first part gives
        elif kind in ("comparator", "and_expression", "or_expression", "not_expression", "function_expression",
                      "multi_select_list", "multi_select_dict", "key_val_pair"):
            stack.extend(children)
    return sorted(set(found), key=found.index)


def _identifier_offset(text: str, name: str) -> int:
    try:
        for tok in lexer.Lexer().tokenize(text):
            if tok["type"] in ("unquoted_identifier", "quoted_identifier") and tok["value"] == name:
                return tok["start"]
    except jexc.JMESPathError:
        pass
    return 0


def _syntax_hint(text: str, exc) -> str:
    """The hint of a parse error: what the most common mistakes need (new-user finding: the spec's
    address alone for ``context.amount > 100`` and for text whose YAML quotes were taken off)."""
    token = getattr(exc, "token_value", None)
    if str(getattr(exc, "token_type", "")).lower() == "number":
        number = re.match(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text[exc.lex_position or 0:])
        shown = number.group(0) if number else token
        return f"a number in JMESPath is a JSON literal in backticks: write `{shown}`"
    if re.fullmatch(r"[A-Za-z][\w ,.!?'-]*", text) and " " in text.strip():
        return (f"text is a literal in single quotes: write '{text}'; in YAML put it inside double quotes, "
                f"\"'{text}'\" (YAML takes a single pair of quotes off)")
    return _SYNTAX_HINT


def _lint(text: str) -> list:
    if not text:
        return [("FC401", 0, "the expression is empty", "write a JMESPath expression, e.g. input.order_id")]
    try:
        tree = parsed(text)
    except jexc.LexerError as exc:
        # LexerError keeps its text in ``message``; its ``msg`` is ParseError's generic default.
        pos = exc.lexer_position or 0
        return [("FC401", pos, f"invalid expression {text!r}: {exc.message} (column {pos + 1})", _SYNTAX_HINT)]
    except jexc.EmptyExpressionError:
        return [("FC401", 0, "the expression is empty", "write a JMESPath expression, e.g. input.order_id")]
    except RecursionError:  # jmespath's lexer and parser are recursive; refuse, do not crash validate
        return [("FC401", 0, "the expression nests too deeply to parse", "split it into smaller expressions")]
    except jexc.ParseError as exc:
        if isinstance(exc, jexc.IncompleteExpressionError) or exc.token_type == "eof":
            what = "the expression ends too early"
        else:
            what = f"unexpected {exc.token_value!r}"
        pos = exc.lex_position or 0
        return [("FC401", pos, f"invalid expression {text!r}: {what} (column {pos + 1})", _syntax_hint(text, exc))]
    except ValueError as exc:  # after ParseError (a ValueError too): e.g. an index of more digits than int() takes
        what = "a number in it has too many digits" if "digits" in str(exc) else str(exc)[:120]
        return [("FC401", 0, f"invalid expression: {what}", "write indices and numbers of at most a few digits")]
    deep = _nesting(tree, text)
    if deep > MAX_NESTING:
        return [("FC408", 0, f"the expression nests {deep} levels deep; flowctl evaluates at most {MAX_NESTING} "
                 "(it would fail at run time)", "split it: compute parts in set: and combine those")]
    if '"' not in text and "`" not in text and "(" not in text:
        return []  # nothing the token checks below could find
    problems = []
    try:
        tokens = list(lexer.Lexer().tokenize(text))
    except RecursionError:
        return [("FC401", 0, "the expression nests too deeply to parse", "split it into smaller expressions")]
    comparators = {"eq", "ne", "lt", "gt", "lte", "gte"}
    for i, tok in enumerate(tokens):
        if tok["type"] == "quoted_identifier":
            near = {tokens[j]["type"] for j in (i - 1, i + 1) if 0 <= j < len(tokens)}
            if near & comparators:
                problems.append(("FC402", tok["start"],
                                 f'"{tok["value"]}" is a field name in JMESPath, not a string',
                                 f"write the string as '{tok['value']}' (single quotes)"))
        elif tok["type"] == "literal":
            raw = _literal_source(text, tok["start"])
            if raw is not None:
                try:
                    json.loads(raw)
                except ValueError:
                    problems.append(("FC403", tok["start"], f"`{raw}` is not a JSON literal (deprecated elided quotes)",
                                     f"write '{raw}' for a string, or `\"{raw}\"`"))
    for name, offset in _function_calls(tree, tokens):
        if name not in _KNOWN_FUNCTIONS:
            import difflib  # only for a misspelt name: off the import path

            close = difflib.get_close_matches(name, _KNOWN_FUNCTIONS, n=1)
            problems.append(("FC404", offset, f"unknown function {name}()",
                             f"did you mean {close[0]}()?" if close else "known: " + ", ".join(sorted(_KNOWN_FUNCTIONS))))
    return problems


def _nesting(tree, text: str) -> int:
    """The deeper of the parsed tree's depth and the bracket nesting of ``text`` (no recursion)."""
    if 2 * len(text) < MAX_NESTING:
        return 0  # every level of the tree takes at least one character of the text
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((c, depth + 1) for c in node.get("children") or () if isinstance(c, dict))
    if text.count("(") + text.count("[") + text.count("{") > MAX_NESTING:
        level = 0
        for ch in text:  # an over-estimate (brackets in strings count too), only for long texts
            level += ch in "([{"
            level -= ch in ")]}"
            deepest = max(deepest, level)
    return deepest


def _literal_source(text: str, start: int):
    if start >= len(text) or text[start] != "`":
        return None
    i = start + 1
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 2
            continue
        if text[i] == "`":
            return text[start + 1:i].replace("\\`", "`").strip()
        i += 1
    return None


def _function_calls(tree, tokens):
    names = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "function_expression":
                names.append(node.get("value"))
            stack.extend(node.get("children", ()))
    positions = {t["value"]: t["start"] for t in tokens if t["type"] == "unquoted_identifier"}
    return [(n, positions.get(n, 0)) for n in names]
