"""``orchestration/models.yaml`` (model profiles and prices) and ``orchestration/prompts/`` (the
templates of llm and agent states): reading them with the rest of the definition.

Both are part of the definition snapshot a run pins (:attr:`~flowctl.definition.model.Project.files`),
so a run renders the prompt it started with, and a changed prompt changes the digest. Prompt
templates are read only from the repository: a file or folder that is a link leaving it is refused
(FC008, as for every definition file) and never opened; at run time a template is looked up only
among the snapshot's files (:func:`prompt_file`), never on disk.
"""
from __future__ import annotations

import os
from types import MappingProxyType

from flowctl.definition import kinds
from flowctl.definition.durations import parse_duration
from flowctl.definition.model import ModelProfile, Models
from flowctl.definition.yamlio import read_document
from flowctl.diagnostics import ERROR

#: the optional model profiles file, directly in ``orchestration/``
MODELS_FILES = ("orchestration/models.yaml", "orchestration/models.yml", "orchestration/models.json")
PROMPTS = "orchestration/prompts/"
#: what a prompt template file may be called (anything else in prompts/ is not read)
PROMPT_EXTENSIONS = (".md", ".txt", ".j2", ".jinja", ".jinja2", ".tmpl")
#: a prompt file's size limit (bytes): a template is text a person writes
MAX_PROMPT_BYTES = 256 * 1024


def read_prompts(root, inside, refused: dict | None = None) -> dict:
    """Relative path -> bytes of every template under ``root/orchestration/prompts`` (nested folders
    included, hidden names skipped). ``inside(path)`` says whether a path resolves inside the
    repository; a link leaving it is put in ``refused`` (relative path -> where it leads), not read."""
    base = os.path.join(str(root), "orchestration", "prompts")
    out: dict = {}
    if not os.path.isdir(base) or not inside(base):
        if os.path.isdir(base) and refused is not None:
            refused["orchestration/prompts"] = os.path.realpath(base)
        return out
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and inside(os.path.join(folder, d)))
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(PROMPT_EXTENSIONS):
                continue
            path = os.path.join(folder, name)
            rel = "orchestration/prompts/" + os.path.relpath(path, base).replace(os.sep, "/")
            if not inside(path):
                if refused is not None:
                    refused[rel] = os.path.realpath(path)
                continue
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    out[rel] = fh.read(MAX_PROMPT_BYTES + 1)
    return out


def prompt_file(files, name: str):
    """The bytes of template ``name`` (relative to ``orchestration/prompts/``) in a project's
    ``files``, or None: no such file, or a name that could leave the folder (``..``, absolute,
    backslashes). Only the snapshot is consulted, never the disk."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return None
    if any(part in ("", ".", "..") for part in name.split("/")):
        return None
    return files.get(PROMPTS + name)


def load_models(rel: str, data: bytes):
    """``(Models or None, diagnostics, document)`` of ``orchestration/models.yaml``."""
    doc = read_document(rel, data)
    problems = list(doc.diagnostics)
    if doc.data is None or not isinstance(doc.data, dict):
        if not any(d.severity == ERROR for d in problems):
            problems.append(doc.diag("FC010", "the models file holds one mapping: profiles (and prices)"))
        return None, problems, doc
    problems.extend(kinds.check("models", doc))
    if any(p.severity == ERROR for p in problems):
        return None, problems, doc
    for name, p in doc.data["profiles"].items():
        if p["provider"] != "fake" and not p.get("model"):
            problems.append(doc.diag("FC010", f"profile '{name}' ({p['provider']}) names no model", ("profiles", name),
                                     key=True, hint="add model: the provider's model name (e.g. gpt-4o-mini)"))
        if p["provider"] != "fake" and p.get("replies") is not None:
            problems.append(doc.diag("FC012", f"'replies' has no meaning on a {p['provider']} profile",
                                     ("profiles", name, "replies"), key=True, hint="replies are for provider: fake"))
    if any(p.severity == ERROR for p in problems):
        return None, problems, doc
    profiles = {}
    for name, p in doc.data["profiles"].items():
        replies = {sid: tuple(r) for sid, r in (p.get("replies") or {}).items()}
        profiles[name] = ModelProfile(
            doc, ("profiles", name), name, p["provider"], p.get("model"),
            parse_duration(p["timeout"]) if p.get("timeout") is not None else None, p.get("max_output_tokens"),
            p.get("temperature"), p.get("structured_output"), MappingProxyType(replies))
    prices = {m: {"input": float(v["input"]), "output": float(v["output"])}
              for m, v in (doc.data.get("prices") or {}).items()}
    return Models(doc, (), MappingProxyType(profiles), MappingProxyType(prices)), problems, doc


__all__ = ["MODELS_FILES", "PROMPTS", "PROMPT_EXTENSIONS", "read_prompts", "prompt_file", "load_models"]
