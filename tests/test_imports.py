"""Import hygiene (like click's test_imports.py): validating a valid project stays light.

`flowctl validate` on a valid project must not import the engine's or the graph's heavy
dependencies, nor jsonschema (the generated fast validators accept valid files; jsonschema only
loads to explain an invalid one).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import MINIMAL

HEAVY = ("sqlalchemy", "networkx", "jsonschema", "rich", "graphviz", "cryptography")

SCRIPT = """
import json, sys
import flowctl.cli.main
from click.testing import CliRunner

result = CliRunner().invoke(flowctl.cli.main.main, ["validate", sys.argv[1]])
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"exit": result.exit_code, "output": result.output, "loaded": loaded}))
"""


def validate_in_fresh_interpreter(root):
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(root), json.dumps(HEAVY)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_importing_the_cli_is_light():
    code = "import json, sys; import flowctl.cli.main; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout))
    assert "flowctl" in loaded
    assert not loaded & set(HEAVY)


def test_validating_a_valid_project_imports_no_heavy_module(make_project):
    root = make_project({
        **MINIMAL,
        "states/begin.yaml": "id: begin\ntype: task\ntool: pay@^1\ninput: {x: input.x}\ntimeout: 3s\n",
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\nverify: m:v\ncompensate: m:u\n"
                                     "side_effects:\n  - {type: database_write, target: t}\n",
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow:\n  - {field: input.x, in: [1]}\n",
    })
    found = validate_in_fresh_interpreter(root)
    assert found["exit"] == 0, found["output"]
    assert "no problems found" in found["output"]
    assert found["loaded"] == []


def test_an_invalid_file_does_load_jsonschema_to_explain_itself(make_project):
    # the control for the test above: the probe does see modules when they are imported
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescriptoin: x\n"})
    found = validate_in_fresh_interpreter(root)
    assert found["exit"] == 1
    assert "FC011" in found["output"]
    assert "jsonschema" in found["loaded"]
    assert not set(found["loaded"]) & {"sqlalchemy", "networkx", "rich", "graphviz", "cryptography"}


@pytest.mark.parametrize("module", ["flowctl", "flowctl.cli.main", "flowctl.check.checks", "flowctl.definition.loader", "flowctl.check.render"])
def test_modules_import_without_the_heavy_dependencies(module):
    code = f"import json, sys; import {module}; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not set(json.loads(r.stdout)) & set(HEAVY)


def test_flowctl_validate_stays_the_function_after_the_engine_ran(tmp_path):
    import flowctl
    from flowctl.store.sql import MemoryStore
    from helpers import MINIMAL, write_project

    project = flowctl.load_project(write_project(tmp_path / "p", MINIMAL))
    flowctl.Engine(project, MemoryStore()).run("flow", {})  # check=True imports the checks module
    assert callable(flowctl.validate) and flowctl.validate(project) == []
