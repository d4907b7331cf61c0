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

from .diagnostics import ERROR, WARNING, Diagnostic

MAX_FILE_BYTES = 1 << 20  # 1 MiB per definition file
MAX_NODES = 200_000  # nodes visited while expanding aliases
MAX_DEPTH = 200

Path = tuple


class _Resolver(yaml.resolver.BaseResolver):
    """Implicit scalar resolution of the YAML 1.2 core schema (spec 1.2.2, section 10.3.2)."""

    yaml_implicit_resolvers: dict = {}


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

    ``data``: the plain data, or ``None`` when the file could not be read.
    ``positions``: path -> (line, column) of the value at that path (1-based).
    ``key_positions``: path -> (line, column) of the mapping key that leads to that path.
    ``styles``: path -> scalar style (``'"'``, ``"'"``, ``'|'``, ``'>'`` or ``''`` for plain).
    """

    file: str
    data: object = None
    positions: dict = field(default_factory=dict)
    key_positions: dict = field(default_factory=dict)
    styles: dict = field(default_factory=dict)
    diagnostics: list = field(default_factory=list)

    def at(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """Best known (line, column) for ``path``: the key or value there, else its nearest parent."""
        path = tuple(path)
        while True:
            if key and path in self.key_positions:
                return self.key_positions[path]
            if path in self.positions:
                return self.positions[path]
            if path in self.key_positions:
                return self.key_positions[path]
            if not path:
                return (1, 1)
            path = path[:-1]

    def diag(self, code: str, message: str, path: Path = (), *, key: bool = False, hint: str = "",
             severity: str = "", offset: int = 0) -> Diagnostic:
        """A diagnostic located at ``path`` (``key=True``: at its key); ``offset`` shifts the column."""
        line, column = self.at(path, key=key)
        return Diagnostic(code, message, self.file, line, column + offset, hint, severity)


class _Limit(Exception):
    pass


class _Builder:
    """Walks a composed node graph into plain data, recording positions, within the limits."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.visited = 0
        self.stack: list[int] = []

    def build(self, node, path: Path):
        self.visited += 1
        if self.visited > MAX_NODES:
            raise _Limit(f"the document expands to more than {MAX_NODES} nodes (aliases)")
        if len(self.stack) > MAX_DEPTH:
            raise _Limit(f"the document nests deeper than {MAX_DEPTH} levels")
        doc = self.doc
        doc.positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, ScalarNode):
            doc.styles[path] = node.style or ""
            return self.scalar(node, path)
        if id(node) in self.stack:
            raise _Limit("a recursive alias refers to itself")
        self.stack.append(id(node))
        try:
            if node.tag not in _CORE_TAGS:
                self._bad_tag(node, path)
            if isinstance(node, SequenceNode):
                return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
            return self.mapping(node, path)
        finally:
            self.stack.pop()

    def _bad_tag(self, node, path):
        self.doc.diagnostics.append(
            self.doc.diag("FC007", f"unsupported tag {node.tag!r}", path,
                          hint="definition files hold plain data; remove the tag")
        )

    def mapping(self, node: MappingNode, path: Path) -> dict:
        out: dict = {}
        first_line: dict = {}
        pairs = list(node.value)
        merged: list = []
        for key_node, value_node in pairs:
            if isinstance(key_node, ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge" or (
                isinstance(key_node, ScalarNode) and key_node.value == "<<" and not key_node.style
            ):
                merged.append(value_node)
        for source in merged:  # YAML 1.1 merge keys: explicit keys override merged ones.
            sources = source.value if isinstance(source, SequenceNode) else [source]
            for src in sources:
                if isinstance(src, MappingNode):
                    value = self.build(src, path)
                    for k, v in value.items():
                        out.setdefault(k, v)
        for key_node, value_node in pairs:
            if isinstance(key_node, ScalarNode) and key_node.value == "<<" and not key_node.style:
                continue
            if not isinstance(key_node, ScalarNode):
                line, col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                self.doc.diagnostics.append(Diagnostic("FC010", "mapping keys must be plain strings",
                                                       self.doc.file, line, col))
                continue
            key = key_node.value
            kpos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in first_line:
                self.doc.diagnostics.append(
                    Diagnostic(
                        "FC002",
                        f"duplicate key {key!r} (first at line {first_line[key][0]}, again at line {kpos[0]})",
                        self.doc.file, kpos[0], kpos[1],
                        hint=f"keep one '{key}'; the value at line {kpos[0]} would silently win",
                    )
                )
            else:
                first_line[key] = kpos
            self.doc.key_positions[path + (key,)] = kpos
            out[key] = self.build(value_node, path + (key,))
        return out

    def scalar(self, node: ScalarNode, path: Path):
        tag, value = node.tag, node.value
        if tag == "tag:yaml.org,2002:str":
            if not node.style and path and path[-1] not in ("description", "cause", "reason"):
                self._yaml11_warning(value, path)
            return value
        if tag == "tag:yaml.org,2002:null":
            return None
        if tag == "tag:yaml.org,2002:bool":
            return value.lower() == "true"
        if tag == "tag:yaml.org,2002:int":
            try:
                if value.startswith("0o"):
                    return int(value[2:], 8)
                if value.startswith("0x"):
                    return int(value[2:], 16)
                number = int(value, 10)
            except ValueError:
                self.doc.diagnostics.append(self.doc.diag("FC010", f"{value!r} is not an integer", path))
                return value
            if not node.style and _YAML11_NUMBER.match(value):
                self._yaml11_warning(value, path)
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
                self.doc.diagnostics.append(self.doc.diag("FC010", f"{value!r} is not a number", path))
                return value
        self._bad_tag(node, path)
        return value

    def _yaml11_warning(self, value: str, path: Path) -> None:
        if _YAML11_BOOL.match(value):
            seen = "a boolean"
        elif _YAML11_NUMBER.match(value):
            seen = "a number"
        elif _YAML11_DATE.match(value):
            seen = "a date"
        else:
            return
        self.doc.diagnostics.append(
            self.doc.diag(
                "FC004",
                f"plain {value!r} is read as {_describe(value)} here (YAML 1.2), but YAML 1.1 tools read it as {seen}",
                path,
                hint=f"quote it ('{value}') so every tool reads the same value",
            )
        )


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
        if exc.context and exc.problem:
            problem = f"{exc.problem} ({exc.context})"
        doc.diagnostics.append(Diagnostic("FC001", f"cannot parse: {problem}", file, line, col))
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
        _check_expansion(node)
        doc.data = _Builder(doc).build(node, ())
    except _Limit as exc:
        doc.data = None
        doc.positions.clear()
        doc.key_positions.clear()
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
