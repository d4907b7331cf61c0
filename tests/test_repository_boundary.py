"""Only the repository is read, and nothing is fetched (issue 13, item 4).

Links that leave the repository, files validate refuses, schemas that are not valid JSON Schemas
or that point outside themselves, and patterns that backtrack catastrophically.
"""
from __future__ import annotations

import http.server
import json
import sqlite3
import threading
import time

import pytest

from support.enginekit import Harness, build, contract, sqlite_store, task
from flowctl.definition.runtime_schemas import check_instance
from support.helpers import MINIMAL, one, problems

PASSWD_LIKE = "root:x:0:0:root:/root:/bin/bash\n"


def test_link_outside_the_repository_is_refused_located_and_never_stored(tmp_path, make_project):
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text(PASSWD_LIKE)
    root = make_project(MINIMAL)
    (root / "orchestration" / "states" / "leak.yaml").symlink_to(secret)
    (root / "orchestration" / "policies").mkdir()
    (root / "orchestration" / "policies" / "p.yaml").symlink_to(secret)
    d = [x for x in problems(root) if x.code == "FC008"]
    assert [(x.file, x.line, x.severity) for x in d] == [("orchestration/policies/p.yaml", 1, "error"),
                                                         ("orchestration/states/leak.yaml", 1, "error")]
    assert str(secret) in d[0].message and "outside the repository" in d[0].message
    # a run of the (valid) flow stores none of it
    h = Harness(root, store=sqlite_store(tmp_path), check=False)
    assert h.run("flow").status == "succeeded"
    stored = sqlite3.connect(tmp_path / "flowctl.db").execute("SELECT files FROM flowctl_definitions").fetchall()
    assert stored and all("root:x:0:0" not in text for (text,) in stored)


def test_link_inside_the_repository_is_read(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": None})
    real = root / "shared_done.yaml"
    real.write_text("id: done\ntype: succeed\n")
    (root / "orchestration" / "states" / "done.yaml").symlink_to(real)
    assert [x for x in problems(root) if x.severity == "error"] == []


def test_rejected_files_are_never_copied_into_a_definition_snapshot(tmp_path):
    files = {**MINIMAL, "states/broken.yaml": "id: broken\ntype: task\ntool: [not, a, string]\nsecret: hunter2\n"}
    root = build(tmp_path, files)
    h = Harness(root, store=sqlite_store(tmp_path), check=False)
    assert any(d.file == "orchestration/states/broken.yaml" and d.severity == "error" for d in h.project.diagnostics)
    assert h.run("flow").status == "succeeded"
    (stored,) = sqlite3.connect(tmp_path / "flowctl.db").execute("SELECT files FROM flowctl_definitions").fetchone()
    assert "orchestration/states/broken.yaml" not in json.loads(stored) and "hunter2" not in stored
    assert "orchestration/states/begin.yaml" in json.loads(stored)


@pytest.mark.parametrize("schema, where", [
    ('{type: object, required: "a"}', "required"),
    ('{type: object, properties: {n: {minimum: "a"}}}', "minimum"),
    ('{type: object, properties: {n: {multipleOf: 0}}}', "multipleOf"),
    ('{type: object, properties: {n: {pattern: 5}}}', "pattern"),
    ('{$ref: "#"}', "$ref"),
    ('{type: object, properties: {n: {enum: 5}}}', "enum"),
    ('{type: object, dependencies: {a: {$ref: "https://example.com/a.json"}}}', "$ref"),
    ('{type: object, properties: {n: {items: [{$ref: "file:///etc/passwd"}]}}}', "$ref"),
    ('{type: object, properties: {n: {type: string, pattern: "(?=a)b"}}}', "pattern"),
])
@pytest.mark.parametrize("kind", ["flow", "state", "contract"])
def test_invalid_embedded_schema_is_a_located_validate_error_in_every_kind(make_project, schema, where, kind):
    files = dict(MINIMAL)
    if kind == "flow":
        files["transitions/flow.yaml"] = MINIMAL["transitions/flow.yaml"] + f"input_schema: {schema}\n"
        path, line = "orchestration/transitions/flow.yaml", 7
    elif kind == "state":
        files["states/begin.yaml"] = f"id: begin\ntype: task\ntool: c@1.0.0\ninput_schema: {schema}\n"
        files["contracts/c.v1.0.0.yaml"] = "id: c\nversion: 1.0.0\nentrypoint: m:f\n"
        path, line = "orchestration/states/begin.yaml", 4
    else:
        files["contracts/c.v1.0.0.yaml"] = f"id: c\nversion: 1.0.0\nentrypoint: m:f\noutput_schema: {schema}\n"
        path, line = "orchestration/contracts/c.v1.0.0.yaml", 4
    d = one(problems(make_project(files)), "FC609")
    assert (d.file, d.line, d.severity) == (path, line, "error")
    assert where in d.message


def test_valid_embedded_schemas_still_pass(make_project):
    schema = ('{type: object, required: [a], properties: {a: {type: [string, "null"], pattern: "^[A-Z]{3}$"}, '
              'b: {$ref: "#/$defs/n"}, c: {type: array, items: {type: integer}, prefixItems: [{const: 1}]}}, '
              '$defs: {n: {type: number, multipleOf: 0.5, minimum: 0}}, dependentRequired: {a: [b]}}')
    files = {**MINIMAL, "transitions/flow.yaml": MINIMAL["transitions/flow.yaml"] + f"input_schema: {schema}\n"}
    assert [d for d in problems(make_project(files)) if d.severity == "error"] == []


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = []

    def do_GET(self):  # noqa: N802 - http.server's name
        _Counter.hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def schema_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Counter.hits.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("shape", ["dependencies", "items_list", "properties", "allOf"])
def test_remote_ref_is_never_fetched_at_run_time(schema_server, shape):
    ref = {"$ref": f"{schema_server}/{shape}.json"}
    schema = {"dependencies": {"a": ref}, "items_list": {"properties": {"a": {"items": [ref]}}},
              "properties": {"properties": {"a": ref}}, "allOf": {"allOf": [ref]}}[shape]
    schema = dict(schema, type="object")
    problem = check_instance(schema, {"a": [5]})
    assert problem is not None and "never fetched" in problem
    assert _Counter.hits == []


def test_remote_ref_in_a_stored_snapshot_fails_the_step_without_a_fetch(tmp_path, schema_server):
    tools = "def f(input, call):\n    return {'a': 1}\n"
    files = {**contract("c", "f", extra="output_schema: {type: object}\n"), **task("t", "c@1.0.0"),
             "transitions/f.yaml": "flow: f\nstart: t\ntransitions:\n  - {from: t, to: done}\n"}
    h = Harness(build(tmp_path, files, tools), store=sqlite_store(tmp_path), check=False)
    # a definition validate never saw (stored by an older flowctl): the schema reaches the run
    (found,) = h.project.contracts["c"]
    object.__setattr__(found, "output_schema", {"type": "object", "dependencies": {"a": {"$ref": f"{schema_server}/x"}}})
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "SCHEMA_MISMATCH"
    assert "never fetched" in result.error["message"] and _Counter.hits == []


def test_catastrophic_pattern_cannot_stall_a_run(tmp_path):
    files = {"transitions/f.yaml": "flow: f\nstart: done\ninput_schema:\n  type: object\n  properties:\n"
                                   "    s: {type: string, pattern: '^(a+)+$'}\n    k:\n      type: object\n"
                                   "      patternProperties: {'^(a|aa)+$': {type: integer}}\n"
                                   "      additionalProperties: false\n"
                                   "transitions: []\n"}
    h = Harness(build(tmp_path, files), store=sqlite_store(tmp_path))
    evil = "a" * 5000 + "!"
    started = time.perf_counter()
    with pytest.raises(Exception, match="does not match"):
        h.run(input={"s": evil})
    with pytest.raises(Exception, match="not allowed"):
        h.run(input={"k": {evil: 1}})
    assert time.perf_counter() - started < 5  # a backtracking engine takes longer than the universe's age
    assert h.run(input={"s": "aaa", "k": {"aaaa": 1}}).status == "succeeded"
