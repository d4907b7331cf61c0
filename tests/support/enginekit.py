"""Helpers for engine tests: a tiny project from YAML snippets, run with a fake clock."""
from __future__ import annotations

import textwrap

import flowctl
from flowctl.engine.clock import FakeClock
from flowctl.store.sql import MemoryStore, open_store

from support.helpers import write_project

SUCCEED = "id: done\ntype: succeed\n"


def contract(tool_id, fn, *, version="1.0.0", module="tk", extra=""):
    text = f"id: {tool_id}\nversion: {version}\nentrypoint: {module}:{fn}\n" + textwrap.dedent(extra)
    return {f"contracts/{tool_id}.v{version}.yaml": text}


def effect_contract(tool_id, fn, *, module="tk", extra="", version="1.0.0"):
    body = f"verify: {module}:verify_{fn}\ncompensate: {module}:undo_{fn}\nside_effects:\n  - {{type: database_write, target: t}}\n"
    return contract(tool_id, fn, module=module, version=version, extra=body + textwrap.dedent(extra))


def allow_all(*tools):
    return {"policies/allow_all.yaml": f"policy: allow_all\napplies_to: [{', '.join(tools)}]\nallow: []\n"}


def task(sid, tool, *, extra=""):
    return {f"states/{sid}.yaml": f"id: {sid}\ntype: task\ntool: {tool}\n" + textwrap.dedent(extra)}


def build(tmp_path, files: dict, tools: str = "", name: str = "p"):
    files = dict(files)
    files.setdefault("states/done.yaml", SUCCEED)
    if tools:
        files["tools/tk.py"] = textwrap.dedent(tools)
    return write_project(tmp_path / name, files)


class Harness:
    """A project, an engine on a fake clock, and the ledger its tools write (``tk.LEDGER``)."""

    def __init__(self, root, store=None, max_inline_wait=10.0, check=True):
        self.root = root
        self.project = flowctl.load_project(root)
        self.clock = FakeClock()
        self.events = []
        self.store = store or MemoryStore()
        self.engine = flowctl.Engine(self.project, self.store, clock=self.clock, max_inline_wait=max_inline_wait,
                                     listener=self.events.append, check=check)

    def run(self, flow="f", input=None, **kw):
        return self.engine.run(flow, input if input is not None else {}, **kw)

    def types(self, run_id=None):
        return [e["type"] for e in self.events if run_id is None or e["run_id"] == run_id]

    def ledger(self):
        from flowctl.engine.tools import resolve

        return list(resolve("tk:LEDGER", str(self.root / "orchestration" / "tools")))


def sqlite_store(tmp_path):
    return open_store(f"sqlite:///{tmp_path}/flowctl.db")
