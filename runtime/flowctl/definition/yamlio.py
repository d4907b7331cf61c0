"""Safe reading of definition files (YAML 1.2 core schema, or JSON) with source positions.

:func:`read_document` turns bytes into a :class:`Document`: plain Python data (``dict``,
``list``, ``str``, ``int``, ``float``, ``bool``, ``None``) plus the 1-based ``line``/``column``
of every key and value, addressed by its path (a tuple of keys and list indexes).

Rules, and where they come from:

* Scalars resolve by the YAML 1.2 core schema, not YAML 1.1: ``on``/``no``/``y`` stay strings,
  ``010`` is the decimal 10, ``12:30`` stays a string, dates stay strings. Plain scalars that
  YAML 1.1 would have read differently are reported (``FC004``, a warning) so nobody is surprised
  by another tool reading the same file.
* Mapping keys are always strings (their source text), as in JSON.
* Duplicate keys are errors naming both lines (``FC002``); the later value is kept.
* Tags other than the core ones are refused (``FC007``): nothing is ever constructed.
* Files over :data:`MAX_FILE_BYTES` and documents whose alias expansion would exceed
  :data:`MAX_NODES` nodes (the "billion laughs") are refused (``FC003``) without expanding them.

Errors are returned as :class:`~flowctl.diagnostics.Diagnostic` objects; only a document that
cannot be read at all has ``data is None``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from flowctl.diagnostics import ERROR, WARNING, Diagnostic

MAX_FILE_BYTES = 1 << 20  # 1 MiB per definition file
MAX_NODES = 200_000  # nodes visited while expanding aliases
MAX_DEPTH = 200

Path = tuple


class _Resolver(yaml.resolver.BaseResolver):
    """Implicit scalar resolution of the YAML 1.2 core schema (spec 1.2.2, section 10.3.2)."""

    yaml_implicit_resolvers: dict = {}

    def resolve(self, kind, value, implicit):  # the hot path of parsing: one call per node
        if kind is ScalarNode:
            if implicit[0]:
                for tag, regexp in self.yaml_implicit_resolvers.get(value[:1], ()):
                    if regexp.match(value):
                        return tag
            return _STR
        return _SEQ if kind is SequenceNode else _MAP


for _tag, _regexp, _first in [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
]:
    _Resolver.add_implicit_resolver(_tag, re.compile(_regexp), list(_first))

try:  # libyaml's parser and composer in C; resolution stays in _Resolver above.
    from yaml.cyaml import CParser as _Parser

    class _Composer(_Parser, _Resolver):
        def __init__(self, stream):
            _Parser.__init__(self, stream)
            _Resolver.__init__(self)

except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Composer(Reader, Scanner, Parser, Composer, _Resolver):  # type: ignore[no-redef]
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)
            _Resolver.__init__(self)


# What YAML 1.1 (PyYAML's default, many editors and older tools) would have read differently.
_YAML11_BOOL = re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$")
_YAML11_NUMBER = re.compile(r"^(?:[-+]?0[0-7_]+|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|[-+]?0b[01_]+|[-+]?[0-9][0-9_]*_[0-9_]*)$")
_YAML11_DATE = re.compile(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
_JSON_TOKEN_OR_TAB = re.compile(r'"(?:[^"\\\n]|\\.)*"|\t')  # a JSON string (kept as is) or a tab

_ANCHOR = re.compile(r"(?<![&\w])&(?![&\s])")  # an anchor (&name), not JMESPath's && or text like R&D
_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_CORE_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


@dataclass
class Document:
    """A parsed definition file.

    ``data``: the plain data, or ``None`` when the file could not be read. ``root``: the composed
    YAML node tree; positions are looked up in it on demand (:meth:`at`), so reading a valid file
    builds nothing but its data.
    """

    file: str
    data: object = None
    root: object = field(default=None, repr=False)
    diagnostics: list = field(default_factory=list)
    _at: dict = field(default_factory=dict, repr=False, compare=False)

    def _walk(self, path):
        """``(node, key_node)`` at ``path`` as far as it resolves, and whether it resolved fully."""
        node, key_node = self.root, None
        for part in path:
            if isinstance(node, MappingNode):
                found = _find_key(node, part)
                if found is None:
                    return node, key_node, False
                key_node, node = found
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                key_node, node = None, node.value[part]
            else:
                return node, key_node, False
        return node, key_node, True

    def at(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """(line, column), 1-based, of the value at ``path`` (``key=True``: of its mapping key);
        the nearest enclosing node when ``path`` goes further than the file."""
        if self.root is None:
            return (1, 1)
        cache_key = (tuple(path), key)
        found = self._at.get(cache_key)
        if found is None:
            node, key_node, complete = self._walk(cache_key[0])
            mark = key_node.start_mark if (key and complete and key_node is not None) else node.start_mark
            found = self._at[cache_key] = (mark.line + 1, mark.column + 1)
        return found

    def style(self, path: Path) -> str:
        """Scalar style at ``path``: ``'"'``, ``"'"``, ``'|'``, ``'>'``, or ``''`` (plain or none)."""
        if self.root is None:
            return ""
        node, _, complete = self._walk(tuple(path))
        return (node.style or "") if complete and isinstance(node, ScalarNode) else ""

    @property
    def positions(self) -> dict:
        """path -> (line, column) of every value (built on request; for tools and tests)."""
        out: dict = {}

        def walk(node, path, depth=0):
            if depth > MAX_DEPTH or len(out) > MAX_NODES:
                return
            out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
            if isinstance(node, SequenceNode):
                for i, child in enumerate(node.value):
                    walk(child, path + (i,), depth + 1)
            elif isinstance(node, MappingNode):
                for k, v in node.value:
                    if isinstance(k, ScalarNode):
                        walk(v, path + (k.value,), depth + 1)

        if self.root is not None and self.data is not None:
            walk(self.root, ())
        return out

    def diag(self, code: str, message: str, path: Path = (), *, key: bool = False, hint: str = "",
             severity: str = "", offset: int = 0) -> Diagnostic:
        """A diagnostic located at ``path`` (``key=True``: at its key); ``offset`` shifts the column."""
        line, column = self.at(path, key=key)
        return Diagnostic(code, message, self.file, line, column + offset, hint, severity)


_KEY_INDEX: dict = {}


def _index(node: MappingNode):
    """``({key: (key_node, value_node)} with the last duplicate winning, [merge sources])``, built
    once per mapping node, so locating many keys of one big mapping stays linear."""
    found = _KEY_INDEX.get(id(node))
    if found is not None and found[0] is node:
        return found[1], found[2]
    table, merges = {}, []
    for k, v in node.value:
        if isinstance(k, ScalarNode):
            if k.value == "<<" and not k.style:
                merges.append(v)
            else:
                table[k.value] = (k, v)
    if len(_KEY_INDEX) > 10_000:
        _KEY_INDEX.clear()
    _KEY_INDEX[id(node)] = (node, table, merges)
    return table, merges


def _find_key(node: MappingNode, key):
    """The last ``(key_node, value_node)`` of ``node`` whose key is ``key`` (merge keys searched too)."""
    table, merges = _index(node)
    found = table.get(key)
    if found is None:
        for m in merges:
            for src in (m.value if isinstance(m, SequenceNode) else [m]):
                if isinstance(src, MappingNode):
                    found = found or _find_key(src, key)
    return found


class _Limit(Exception):
    pass


def _mark(node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


_NO_YAML11 = frozenset({"description", "cause", "reason"})
_YAML11_FIRST = frozenset("yYnNoO0123456789+-")


class _Builder:
    """Walks a composed node tree into plain data (aliases already checked by _check_expansion)."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.diags = doc.diagnostics

    def _diag(self, code, message, node, hint=""):
        line, col = _mark(node)
        self.diags.append(Diagnostic(code, message, self.doc.file, line, col, hint))

    def build(self, node, parent_key=None, depth=0):
        if depth > MAX_DEPTH:
            raise _Limit(f"the document nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, ScalarNode):
            return self.scalar(node, parent_key)
        if node.tag not in _CORE_TAGS:
            self._bad_tag(node)
        if isinstance(node, SequenceNode):
            return [self.build(item, parent_key, depth + 1) for item in node.value]
        return self.mapping(node, depth)

    def _bad_tag(self, node):
        self._diag("FC007", f"unsupported tag {node.tag!r}", node, "definition files hold plain data; remove the tag")

    def mapping(self, node: MappingNode, depth: int) -> dict:
        out: dict = {}
        first_line: dict = {}
        merged = None
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self._diag("FC010", "mapping keys must be plain strings", key_node)
                continue
            key = key_node.value
            if key == "<<" and not key_node.style:  # YAML 1.1 merge key: explicit keys win
                merged = (merged or []) + (value_node.value if isinstance(value_node, SequenceNode) else [value_node])
                continue
            if key in first_line:
                line, col = _mark(key_node)
                self.diags.append(Diagnostic(
                    "FC002", f"duplicate key {key!r} (first at line {first_line[key]}, again at line {line})",
                    self.doc.file, line, col, hint=f"keep one '{key}'; the value at line {line} would silently win"))
            else:
                first_line[key] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, key, depth + 1)
        for src in merged or ():
            if isinstance(src, MappingNode):
                for k, v in self.build(src, None, depth + 1).items():
                    out.setdefault(k, v)
        return out

    def scalar(self, node: ScalarNode, parent_key):
        tag, value = node.tag, node.value
        if tag == _STR:
            if not node.style and value[:1] in _YAML11_FIRST and parent_key not in _NO_YAML11:
                self._yaml11_warning(value, node)
            return value
        if tag == "tag:yaml.org,2002:null":
            if value not in ("", "~", "null", "Null", "NULL"):
                self._diag("FC010", f"{value!r} is not null (YAML 1.2: null, ~ or nothing)", node)
            return None
        if tag == "tag:yaml.org,2002:bool":
            if value not in ("true", "True", "TRUE", "false", "False", "FALSE"):
                self._diag("FC010", f"{value!r} is not a boolean (YAML 1.2: true or false)", node,
                           "YAML 1.1 words like yes/on are strings here")
                return value
            return value.lower() == "true"
        if tag == "tag:yaml.org,2002:int":
            try:
                if value.startswith("0o"):
                    return int(value[2:], 8)
                if value.startswith("0x"):
                    return int(value[2:], 16)
                number = int(value, 10)
            except ValueError:
                self._diag("FC010", f"{value!r} is not an integer", node)
                return value
            if not node.style and _YAML11_NUMBER.match(value):
                self._yaml11_warning(value, node)
            return number
        if tag == "tag:yaml.org,2002:float":
            lowered = value.lower()
            if lowered.endswith("inf"):
                return float("-inf") if value.startswith("-") else float("inf")
            if lowered.endswith("nan"):
                return float("nan")
            try:
                return float(value)
            except ValueError:
                self._diag("FC010", f"{value!r} is not a number", node)
                return value
        self._bad_tag(node)
        return value

    def _yaml11_warning(self, value: str, node) -> None:
        if _YAML11_BOOL.match(value):
            seen = "a boolean"
        elif _YAML11_NUMBER.match(value):
            seen = "a number"
        elif _YAML11_DATE.match(value):
            seen = "a date"
        else:
            return
        self._diag("FC004",
                   f"plain {value!r} is read as {_describe(value)} here (YAML 1.2), but YAML 1.1 tools read it as {seen}",
                   node, f"quote it ('{value}') so every tool reads the same value")


def _check_expansion(root) -> None:
    """Refuse alias bombs and recursive aliases before building anything (memoised, O(nodes))."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if isinstance(node, ScalarNode):
            return 1
        if key in active:
            raise _Limit("a recursive alias refers to itself")
        if len(active) > MAX_DEPTH:
            raise _Limit(f"the document nests deeper than {MAX_DEPTH} levels")
        active.add(key)
        children = node.value if isinstance(node, SequenceNode) else [n for pair in node.value for n in pair]
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise _Limit(f"the document expands to more than {MAX_NODES} nodes (aliases)")
        active.discard(key)
        sizes[key] = total
        return total

    size(root)


def _describe(value: str) -> str:
    if re.fullmatch(r"[-+]?[0-9]+", value):
        return f"the integer {int(value)}"
    return "a string"


def _line_of(content, line: int) -> str:
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else str(content)
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _parse_hint(exc, started, text_line: str = "") -> str:
    """What the most common YAML mistakes need (new-user finding: a tab, an unclosed quote)."""
    problem, context = exc.problem or "", exc.context or ""
    if "cannot start any token" in problem and "\t" in text_line:
        return "YAML indents with spaces, never tabs: replace the tab with spaces"
    if "quoted scalar" in context and started is not None:
        return f"the quote opened at line {started.line + 1}, column {started.column + 1} is not closed"
    if "expected key" in problem or "expected <block end>" in problem:
        return ("a quote or bracket opened on an earlier line may not be closed, or this line is indented "
                "differently from the keys above it")
    return ""

def read_document(file: str, content: bytes | str) -> Document:
    """Parse one definition file. Never raises for bad content: problems become diagnostics.

    ``file`` is the name used in diagnostics (relative path). ``content`` is the raw file.
    """
    doc = Document(file)
    size = len(content)
    if size > MAX_FILE_BYTES:
        doc.diagnostics.append(
            Diagnostic("FC003", f"file is {size} bytes; the limit is {MAX_FILE_BYTES}", file,
                       hint="split it, or move data out of the definition")
        )
        return doc
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            doc.diagnostics.append(Diagnostic("FC001", f"file is not UTF-8: {exc.reason} at byte {exc.start}", file))
            return doc
    if "\x00" in content:
        doc.diagnostics.append(Diagnostic("FC001", "file contains a NUL character", file))
        return doc
    if file.endswith(".json") and "\t" in content:
        # JSON allows tabs between tokens; the YAML scanner does not. Same width, so columns hold.
        content = _JSON_TOKEN_OR_TAB.sub(lambda m: " " if m.group() == "\t" else m.group(), content)
    try:
        composer = _Composer(content)
        try:
            node = composer.get_single_node()
        finally:
            dispose = getattr(composer, "dispose", None)
            if dispose:
                dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        started = exc.context_mark
        if started is not None and (started.line, started.column) == (mark.line, mark.column):
            started = None
        if exc.context and exc.problem:
            begun = f" that starts at {started.line + 1}:{started.column + 1}" if started is not None else ""
            problem = f"{exc.problem} ({exc.context}{begun})"
        doc.diagnostics.append(Diagnostic("FC001", f"cannot parse: {problem}", file, line, col,
                                          hint=_parse_hint(exc, started, _line_of(content, line))))
        return doc
    except yaml.YAMLError as exc:
        doc.diagnostics.append(Diagnostic("FC001", f"cannot parse: {exc}", file))
        return doc
    except (ValueError, TypeError, RecursionError) as exc:  # libyaml reader errors surface as these
        doc.diagnostics.append(Diagnostic("FC001", f"cannot parse: {exc}", file))
        return doc
    if node is None:
        doc.data = None
        doc.diagnostics.append(Diagnostic("FC010", "file is empty", file, hint="a definition file holds one mapping"))
        return doc
    try:
        if _ANCHOR.search(content):  # anchors, so possibly aliases: refuse bombs before building anything
            _check_expansion(node)
        doc.data = _Builder(doc).build(node)
        doc.root = node
    except _Limit as exc:
        doc.data = None
        doc.diagnostics.append(Diagnostic("FC003", f"refused: {exc}", file, node.start_mark.line + 1,
                                          node.start_mark.column + 1, hint="write the values out instead of nesting aliases"))
    except RecursionError:
        doc.data = None
        doc.diagnostics.append(Diagnostic("FC003", "refused: the document nests too deeply", file))
    return doc


def loads(text: str, file: str = "<string>"):
    """Parse ``text`` with the same rules and return the data; raise ``ValueError`` on any error."""
    doc = read_document(file, text)
    errors = [d for d in doc.diagnostics if d.severity == ERROR]
    if errors or doc.data is None and errors:
        raise ValueError(f"{errors[0].location}: {errors[0].message}")
    return doc.data


__all__ = ["Document", "read_document", "loads", "MAX_FILE_BYTES", "MAX_NODES", "WARNING"]
