"""Type inference for one JMESPath expression over a scope :class:`~flowctl.check.shapes.Shape`: what
each sub-expression can hold, the sites it reads (for FC801), and the comparisons and function
calls whose argument types are known to clash (FC802, FC805). :mod:`flowctl.check.dataflow` supplies
the scope of each state and turns the findings into diagnostics. Never raises for project content.
"""
from __future__ import annotations

from flowctl.check import shapes as S
from flowctl.diagnostics import Diagnostic
from flowctl.check.shapes import ANY, BOOLEAN, NULL, NUMBER, STRING, Shape, join


_TREES: dict = {}


def parse(text):
    """Parsed JMESPath tree of ``text`` or None (syntax errors are FC401's, depth FC408's)."""
    found = _TREES.get(text, False)
    if found is not False:
        return found
    tree = None
    try:
        from flowctl.expr.expressions import MAX_NESTING, _nesting, parsed

        tree = parsed(text)
        if _nesting(tree, text) > MAX_NESTING:  # FC408: not analysed (nor run)
            tree = None
    except Exception:  # noqa: BLE001 - reported by lint
        tree = None
    if len(_TREES) < 200_000:
        _TREES[text] = tree
    return tree


_ROOTS: dict = {}


def scope_roots(text, tree):
    """The scope names ``tree`` reads (None: it may read the whole scope, e.g. ``@``)."""
    found = _ROOTS.get(text, False)
    if found is False:
        from flowctl.expr.expressions import root_names

        found = None if "@" in text else tuple(root_names(text, tree))
        if len(_ROOTS) < 200_000:
            _ROOTS[text] = found
    return found


class Value:
    """A value during inference: its shape, the path it was read from (``context.a.b``) and the
    first context key on that path that is only sometimes set."""

    __slots__ = ("shape", "label", "unsure")

    def __init__(self, shape, label=None, unsure=None):
        self.shape, self.label, self.unsure = shape, label, unsure


_FUNCS = None


def _functions():
    global _FUNCS
    if _FUNCS is None:
        from flowctl.expr.expressions import _OPTIONS

        table = getattr(_OPTIONS.custom_functions, "FUNCTION_TABLE", {}) or {}
        _FUNCS = {name: spec.get("signature") or () for name, spec in table.items()}
    return _FUNCS


_RETURNS = {
    "abs": NUMBER, "avg": S.of("number", "null"), "ceil": NUMBER, "floor": NUMBER, "contains": BOOLEAN,
    "ends_with": BOOLEAN, "starts_with": BOOLEAN, "join": STRING, "length": NUMBER, "keys": S.array(STRING),
    "values": S.array(ANY), "map": S.array(ANY), "merge": S.of("object"), "sort": S.array(ANY),
    "sort_by": S.array(ANY), "sum": NUMBER, "to_array": S.array(ANY), "to_string": STRING,
    "to_number": S.of("number", "null"), "type": STRING, "to_json": STRING, "uuid": STRING, "now": STRING,
    "add": NUMBER, "subtract": NUMBER, "multiply": NUMBER, "divide": NUMBER, "glob": BOOLEAN, "has": BOOLEAN,
    "to_epoch": NUMBER, "date_add": STRING,
}
#: functions that handle null or any type on purpose: a sometimes-set argument is not a finding
_NULL_SAFE = frozenset({"not_null", "type", "to_string", "to_json", "to_array", "has", "length"})
_JMES_TYPES = {"number": {"number"}, "string": {"string"}, "boolean": {"boolean"}, "array": {"array"},
               "object": {"object"}, "null": {"null"}, "array-number": {"array"}, "array-string": {"array"},
               "expref": set()}


class Site:
    """One expression where it is written: ``doc``/``path``/``text``, where it runs (``state``),
    and whether it is a transition condition."""

    __slots__ = ("doc", "path", "text", "state", "condition", "found", "flow")

    def __init__(self, doc, path, text, state, condition, flow):
        self.doc, self.path, self.text, self.state, self.condition = doc, path, text, state, condition
        self.flow = flow
        self.found: dict = {}

    def report(self, code, message, name, hint="", severity=""):
        key = (code, message)
        if key in self.found:
            return
        style = self.doc.style(tuple(self.path))
        line, col = self.doc.at(tuple(self.path))
        offset = _offset(self.text, name)
        if style in ('"', "'"):
            col += 1 + offset
        elif style == "" and "\n" not in self.text:
            col += offset
        self.found[key] = Diagnostic(code, message, self.doc.file, line, col, hint, severity)


def _offset(text, name) -> int:
    if not name:
        return 0
    try:
        from jmespath import lexer

        for tok in lexer.Lexer().tokenize(text):
            if tok["type"] in ("unquoted_identifier", "quoted_identifier") and tok["value"] == name:
                return tok["start"]
    except Exception:  # noqa: BLE001
        pass
    i = text.find(name)
    return max(i, 0)


class Inference:
    """Abstract evaluation of one parsed expression on a scope shape; with a ``site`` it reports."""

    def __init__(self, analysis, site=None):
        self.a = analysis
        self.site = site
        self.guards: set = set()
        self.unsure_seen: set = set()

    def run(self, tree, scope: Shape) -> Value:
        return self.visit(tree, Value(scope, ""))

    def visit(self, node, cur: Value) -> Value:
        fn = _DISPATCH.get(node.get("type")) if isinstance(node, dict) else None
        if fn is None:
            return Value(ANY)
        return fn(self, node, cur)

    # -------------------------------------------------------------- paths
    def _field(self, node, cur):
        name = node.get("value")
        at_root = cur.label == ""
        if at_root and name in ("null", "true", "false"):
            return Value(NULL)  # bare literals are field names that are always null (FC406/FC407)
        shape, presence = cur.shape.field(name)
        label = name if at_root else (f"{cur.label}.{name}" if cur.label else None)
        if cur.label == "visits" and self.site is not None and self.site.state \
                and not self.a.may_precede(name, self.site.state):
            self._never(cur, name, label)
            return Value(ANY)
        if presence == "never":
            if not at_root and cur.shape.known and self.site is not None:
                self._never(cur, name, label)
            return Value(ANY)  # reported once; say nothing more about what follows
        unsure = cur.unsure
        if unsure is None and presence == "sometimes" and label and label.startswith("context."):
            unsure = label
        if unsure:
            self.unsure_seen.add(unsure)
        return Value(shape, label, unsure)

    def _never(self, cur, name, label):
        site, shape = self.site, cur.shape
        where = f"'{site.state}'" if site.state else "this point"
        flow = f" of flow '{site.flow}'" if site.flow else ""
        what = f"`{label}`" if label else f"'{name}'"
        parent = f"`{cur.label}`" if cur.label else "the value"
        if shape.types == {"null"} or not shape.non_null():
            root = (cur.label or "").split(".")[0]
            why = {"error": "no error is caught on any path into it",
                   "review": "no review is decided on any path into it",
                   "item": "item is defined only in a map state's item_input",
                   "index": "index is defined only in a map state's item_input"}.get(root if cur.label == root else "",
                                                                                      "it is null on every path into it")
            site.report("FC801", f"{parent} is always null at {where}{flow} ({why}), so {what} is always null",
                        name, hint="read it where it is defined, or set it first")
            return
        if "object" not in shape.types:
            site.report("FC801", f"{parent} is {S.describe(shape)} at {where}{flow}, so {what} is always null",
                        name, hint="read a field of an object")
            return
        from flowctl.definition.kinds import did_you_mean

        choices = sorted(shape.props)
        close = did_you_mean(name, choices) if choices else ""
        if cur.label == "context":
            msg = f"no path into {where}{flow} sets {what}, so it is always null"
            hint = close or ("set it in a transition's or handler's set: first" if not choices
                             else "context has: " + ", ".join(choices[:12]))
        elif cur.label == "visits":
            msg = f"no path into {where}{flow} enters state '{name}' first, so {what} is always null"
            states = sorted(self.a.data.entry)
            hint = did_you_mean(name, states) or "visits counts the states entered so far"
        else:
            owner = "declares only" if cur.label == "params" else "can hold only"
            msg = f"{parent} has no field '{name}' on any path into {where}{flow} (it {owner}: " \
                  f"{', '.join(choices[:12]) or 'no fields'}), so {what} is always null"
            hint = close or "add the field to the schema, or read one it has"
        site.report("FC801", msg, name, hint=hint)

    def _subexpression(self, node, cur):
        out = cur
        for child in node.get("children") or ():
            out = self.visit(child, out)
        return out

    def _index_expression(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        left = self.visit(children[0], cur)
        return self.visit(children[1], left)

    def _index(self, node, cur):
        i = node.get("value")
        label = f"{cur.label}[{i}]" if cur.label else None
        return Value(cur.shape.element(i if isinstance(i, int) else None), label, cur.unsure)

    def _slice(self, node, cur):
        if cur.shape.only("array"):
            return Value(S.array(cur.shape.items or ANY))
        return Value(ANY if not cur.shape.known else S.join(S.array(cur.shape.items or ANY), NULL))

    def _literal(self, node, cur):
        return Value(S.of_value(node.get("value")))

    def _current(self, node, cur):
        return cur

    _identity = _current

    def _pipe(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        left = self.visit(children[0], cur)
        return self.visit(children[1], Value(left.shape, left.label or None, left.unsure))

    def _elements(self, val: Value, values=False) -> Shape:
        shape = val.shape
        if shape.types is None:
            return ANY
        if values:
            if "object" not in shape.types:
                return Shape(())
            if not shape.closed:
                return ANY
            return S.join_all(s for s, _ in shape.props.values()) if shape.props else Shape(())
        if "array" not in shape.types:
            return Shape(())
        return shape.items if shape.items is not None else ANY

    def _projection(self, node, cur, values=False):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        left = self.visit(children[0], cur)
        element = self._elements(left, values)
        if element.types is not None and not element.types:
            return Value(NULL if left.shape.known else ANY)
        right = self.visit(children[1], Value(element))
        return Value(S.array(right.shape))

    def _value_projection(self, node, cur):
        return self._projection(node, cur, values=True)

    def _filter_projection(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 3:
            return Value(ANY)
        left = self.visit(children[0], cur)
        element = self._elements(left)
        if element.types is not None and not element.types:
            return Value(NULL if left.shape.known else ANY)
        self.visit(children[2], Value(element))
        right = self.visit(children[1], Value(element))
        return Value(S.array(right.shape))

    def _flatten(self, node, cur):
        children = node.get("children") or ()
        if not children:
            return Value(ANY)
        self.visit(children[0], cur)
        return Value(S.array(ANY))

    def _not_expression(self, node, cur):
        for child in node.get("children") or ():
            self.visit(child, cur)
        return Value(BOOLEAN)

    def _or_expression(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        left, right = self.visit(children[0], cur), self.visit(children[1], cur)
        return Value(join(left.shape, right.shape))

    def _and_expression(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        before = set(self.unsure_seen)
        left = self.visit(children[0], cur)
        tested = self.unsure_seen - before
        added = tested - self.guards
        self.guards |= added
        try:
            right = self.visit(children[1], cur)
        finally:
            self.guards -= added
        return Value(join(left.shape, right.shape))

    def _comparator(self, node, cur):
        children = node.get("children") or ()
        if len(children) != 2:
            return Value(ANY)
        op = node.get("value")
        left, right = self.visit(children[0], cur), self.visit(children[1], cur)
        if self.site is not None:
            self._compare(op, left, right, children)
        return Value(BOOLEAN if op in ("eq", "ne") else S.of("boolean", "null"))

    def _compare(self, op, left, right, children):
        a, b = left.shape.non_null(), right.shape.non_null()
        site = self.site
        symbol = {"eq": "==", "ne": "!=", "lt": "<", "gt": ">", "lte": "<=", "gte": ">="}.get(op, op)
        if a and b and not (a & b):
            hint = _literal_fix(children, a, b)
            left_name = _side_name(children[0], left, "the left side")
            right_name = _side_name(children[1], right, "the right side")
            never = "always false" if op == "eq" else "always true" if op == "ne" else \
                "an ExpressionError at run time"
            site.report("FC802", f"{left_name} is {_a(a)} and {right_name} is {_a(b)}: "
                        f"`{symbol}` of different JSON types is {never}",
                        (left.label or right.label or "").split(".")[-1].split("[")[0],
                        hint=hint or "compare values of the same type (JMESPath does not convert)")
        if site.condition:
            for val, other in ((left, right), (right, left)):
                if val.unsure and val.unsure not in self.guards and other.shape != NULL:
                    self.a.sometimes(site, val.unsure)

    def _function_expression(self, node, cur):
        name = node.get("value")
        args = []
        for child in node.get("children") or ():
            if isinstance(child, dict) and child.get("type") == "expref":
                args.append(None)
                continue
            args.append(self.visit(child, cur))
        if name == "has" and len(args) == 2 and args[0] is not None and args[0].label == "context":
            key = node["children"][1].get("value") if node["children"][1].get("type") == "literal" else None
            if isinstance(key, str):
                self.unsure_seen.add(f"context.{key}")  # has(context, 'k') && context.k …: tested first
        if self.site is not None:
            self._check_args(name, args)
        if name in ("reverse",) and args and args[0] is not None:
            return Value(args[0].shape if args[0].shape.only("array", "string") else ANY)
        if name in ("max", "min"):
            return Value(ANY)
        return Value(_RETURNS.get(name, ANY))

    def _check_args(self, name, args):
        signature = _functions().get(name)
        site = self.site
        if signature is None:
            return
        for i, val in enumerate(args):
            if val is None:
                continue
            spec = signature[min(i, len(signature) - 1)] if signature else None
            allowed = spec.get("types") if isinstance(spec, dict) else None
            if site.condition and val.unsure and val.unsure not in self.guards and name not in _NULL_SAFE:
                self.a.sometimes(site, val.unsure)
            if not allowed:
                continue
            ok: set = set()
            for t in allowed:
                ok |= _JMES_TYPES.get(t, {"?"})
            have = val.shape.non_null()
            if not have or "?" in ok:
                continue
            what = f"`{val.label}`" if val.label else f"argument {i + 1}"
            if not (have & ok):
                site.report("FC805", f"{name}() takes {' or '.join(allowed)} as argument {i + 1}; {what} is "
                            f"{S.type_names(have)} here, so the call fails with ExpressionError",
                            (val.label or "").split(".")[-1].split("[")[0] or name,
                            hint=f"pass {' or '.join(allowed)}")
            elif have == {"array"} and all(t.startswith("array-") for t in allowed) and val.shape.items is not None:
                items = val.shape.items.non_null()
                want = {t.split("-", 1)[1] for t in allowed}
                if items and not (items & want):
                    # a warning: an empty array has no element to refuse, so the call may succeed
                    site.report("FC805", f"{name}() takes {' or '.join(allowed)}; the elements of {what} are "
                                f"{S.type_names(items)}, so the call fails with ExpressionError unless it is empty",
                                (val.label or "").split(".")[-1] or name,
                                hint=f"pass {' or '.join(allowed)}", severity="warning")

    def _multi_select_list(self, node, cur):
        items = [self.visit(c, cur).shape for c in node.get("children") or ()]
        return Value(S.array(S.join_all(items) if items else Shape(()), prefix=items))

    def _multi_select_dict(self, node, cur):
        props = {}
        for pair in node.get("children") or ():
            if isinstance(pair, dict) and pair.get("children"):
                props[str(pair.get("value"))] = self.visit(pair["children"][0], cur).shape
        return Value(S.obj(props, closed=True))

    def _expref(self, node, cur):
        return Value(ANY)


_DISPATCH = {name[1:]: fn for name, fn in vars(Inference).items() if name.startswith("_") and not name.startswith("__")
             and callable(fn) and name not in ("_never", "_compare", "_check_args", "_elements")}


def _a(types) -> str:
    """``a number``, ``an object or a string``."""
    return " or ".join(("an " if t[0] in "aeiou" else "a ") + t for t in S.JSON_TYPES if t in types)


def _side_name(node, val, default) -> str:
    import json

    if isinstance(node, dict) and node.get("type") == "literal":
        value = node.get("value")
        return f"'{value}'" if isinstance(value, str) else f"`{json.dumps(value)}`"
    return f"`{val.label}`" if val.label else default


def _literal_fix(children, left_types, right_types) -> str:
    """The fix when one side is a literal: ``'0.8'`` against a number is `` `0.8` ``."""
    import json

    for node, other in zip(children, (right_types, left_types)):
        if not (isinstance(node, dict) and node.get("type") == "literal"):
            continue
        value = node.get("value")
        if isinstance(value, str):
            try:
                meant = S.of_value(json.loads(value))
            except ValueError:
                meant = None
            if meant is not None and meant.types and meant.types <= other:
                return f"write `{value}` (a JSON literal in backticks), not '{value}'"
            return f"for a {S.type_names(other)}, write a JSON literal in backticks, not a quoted string"
        if other == {"string"}:
            return f"for the string, write '{json.dumps(value)}' in single quotes"
    return ""


# ------------------------------------------------------------------------------ the analysis
