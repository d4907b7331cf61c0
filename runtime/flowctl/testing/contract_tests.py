"""Contract tests: does a side-effecting tool really do, verify and undo what its contract says?

For every ``examples:`` entry of a contract (``{input, output?, description?}``), against the
**real** tool, inside the sandbox its tool package declares:

1. the example's input satisfies the contract's ``input_schema``;
2. **invoke** ``entrypoint(input, call)``; the output satisfies ``output_schema`` and contains the
   example's ``output`` (a subset);
3. side-effecting contracts: **verify** ``(input, output, call)`` must say the effect happened;
4. **compensate** ``(input, output, call)``, then **verify** again must say it is gone — a
   compensate that does not undo is caught here;
5. compensate once more must not raise (the engine may repeat a compensation after a crash).

A read-only contract's examples run steps 1–2 only. ``call`` is a :class:`~flowctl.engine.tools.ToolCall`
with the contract's idempotency key evaluated on the example's input.

**Sandboxes.** Tools name their own: a callable ``flowctl_sandbox(contract)`` returning a context
manager, found in the entrypoint's module, else its top-level package, else that package's
``sandbox`` module. The shipped example tools (``shop_tools.sandbox``) point ``FLOWCTL_SHOP_DB`` at a
temporary copy of a freshly seeded shop database for each example. A side-effecting contract whose
tools declare no sandbox is skipped, never run against the real system; a read-only one runs as is.

**Tests follow the function**, as the gate does: a contract whose ``entrypoint`` is the same
function as a side-effecting contract's (the same ``module:attr``, or another name that resolves to
the very same object, e.g. a re-export) is tested as side-effecting — it needs a sandbox and a
verify — whatever it declares itself.
"""
from __future__ import annotations

import json
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field

from flowctl.definition.toolpath import function_key

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class ContractResult:
    contract: object
    name: str
    status: str
    steps: list = field(default_factory=list)     # [(label, ok, detail)]
    message: str = ""
    sandbox: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status != FAILED

    def report(self) -> str:
        lines = []
        for label, ok, detail in self.steps:
            mark = "ok" if ok else "FAILED"
            lines.append(f"    {label}: {mark}" + (f" — {detail}" if detail else ""))
        if self.message and self.status != PASSED:
            lines.append(f"    {self.message}")
        return "\n".join(lines)


def contracts_to_test(project, flows=None) -> list:
    """Every contract version, or those used by ``flows``; side-effecting ones and ones with examples."""
    wanted = None
    if flows is not None:
        from flowctl.engine.engine import flow_files

        files = set()
        for f in flows:
            if f in project.flows:
                files |= flow_files(project, project.flows[f])
        wanted = files
    out = []
    for tool_id in sorted(project.contracts):
        for c in project.contracts[tool_id]:
            if wanted is not None and c.file not in wanted:
                continue
            if c.side_effecting or c.examples:
                out.append(c)
    return out


def effect_functions(project) -> dict:
    """``{function key: (function, side-effecting contract ref)}`` for every side-effecting
    contract whose entrypoint resolves (one that cannot be resolved is left out: it cannot run)."""
    from flowctl.engine.tools import resolve

    tools_folder = str(project.orchestration / "tools")
    out: dict = {}
    for tool_id in sorted(project.contracts):
        for c in project.contracts[tool_id]:
            if not c.side_effecting:
                continue
            try:
                fn = resolve(c.entrypoint, tools_folder, project.tool_packages)
            except Exception:  # noqa: BLE001 - unimportable or refused
                continue
            out.setdefault(function_key(fn), (fn, c.ref))  # the kept fn keeps the key's ids in use
    return out


def side_effecting_as(project, contract, effects=None) -> str | None:
    """The ref of a side-effecting contract on the same function as ``contract`` (itself when it
    declares side effects), or None when no contract declares effects for that function."""
    from flowctl.engine.tools import resolve

    if contract.side_effecting:
        return contract.ref
    for versions in project.contracts.values():
        for other in versions:
            if other.side_effecting and other.entrypoint == contract.entrypoint:
                return other.ref
    effects = effect_functions(project) if effects is None else effects
    try:
        fn = resolve(contract.entrypoint, str(project.orchestration / "tools"), project.tool_packages)
    except Exception:  # noqa: BLE001 - the invoke step reports it
        return None
    hit = effects.get(function_key(fn))
    return hit[1] if hit is not None else None


def run_contract_tests(project, contracts=None, *, on_result=None) -> list:
    contracts = contracts_to_test(project) if contracts is None else contracts
    effects = effect_functions(project) if any(not c.side_effecting and c.examples for c in contracts) else {}
    out = []
    for c in contracts:
        if not c.examples:
            r = ContractResult(c, f"{c.ref}", SKIPPED,
                               message=f"no examples: add `examples: [{{input: {{...}}}}]` to {c.file} to test it")
            out.append(r)
            if on_result:
                on_result(r)
            continue
        for i, example in enumerate(c.examples):
            r = run_example(project, c, i, example, effects=effects)
            out.append(r)
            if on_result:
                on_result(r)
    return out


def find_sandbox(contract, tools_folder: str):
    """``(callable, "module:flowctl_sandbox")`` declared by the contract's tool package, or None."""
    from flowctl.errors import UsageError
    from flowctl.engine.tools import resolve

    module = contract.entrypoint.partition(":")[0]
    top = module.split(".")[0]
    for name in dict.fromkeys([module, top, f"{top}.sandbox"]):
        try:
            fn = resolve(f"{name}:flowctl_sandbox", tools_folder)
        except UsageError:
            continue
        if callable(fn):
            return fn, f"{name}:flowctl_sandbox"
    return None


def run_example(project, contract, index: int, example: dict, *, effects=None) -> ContractResult:
    """One example of ``contract`` (see the module docstring); ``effects`` is
    :func:`effect_functions` of the project, computed when not given."""
    from flowctl.definition.runtime_schemas import check_instance
    from flowctl.engine.tools import DEFAULT_TIMEOUT, ToolCall, call_with_timeout, resolve
    from flowctl.testing.runner import subset_problems

    label = example.get("description") or f"example {index + 1}"
    result = ContractResult(contract, f"{contract.ref}: {label}", FAILED)
    started = time.perf_counter()
    tools_folder = str(project.orchestration / "tools")
    steps = result.steps
    where = contract.where("examples", index)

    def fail(step, detail):
        steps.append((step, False, detail))
        result.message = f"at {where}"
        result.status = FAILED
        result.seconds = time.perf_counter() - started
        return result

    tool_input = example.get("input") or {}
    if contract.input_schema:
        problem = check_instance(contract.input_schema, tool_input)
        if problem:
            return fail("example input matches input_schema", problem)
    effecting = side_effecting_as(project, contract, effects)
    via = "" if effecting in (None, contract.ref) else f" (its entrypoint is the same function as {effecting}'s)"
    found = find_sandbox(contract, tools_folder)
    if found is None and effecting:
        result.status = SKIPPED
        result.message = (f"{contract.ref} has side effects{via} and its tools declare no sandbox "
                          f"(define flowctl_sandbox in its package); not run against the real system")
        return result
    timeout = contract.timeout or DEFAULT_TIMEOUT
    call = ToolCall(f"contract-test-{uuid.uuid4().hex[:12]}", 1, f"contract:{contract.id}", 1,
                    _key(contract, tool_input), time.time() + timeout, contract.ref)
    sandbox = found[0](contract) if found else nullcontext()
    result.sandbox = found[1] if found else None
    try:
        with sandbox:
            try:
                entry = resolve(contract.entrypoint, tools_folder, project.tool_packages)
                raw = call_with_timeout(entry, (tool_input, call), timeout, f"{contract.ref}")
                output = _parse(raw)
            except Exception as exc:  # noqa: BLE001
                return fail("invoke", _describe(exc))
            steps.append(("invoke", True, ""))
            if contract.output_schema:
                problem = check_instance(contract.output_schema, output)
                if problem:
                    return fail("output matches output_schema", problem)
            if "output" in example:
                wrong = subset_problems(example["output"], output, "output")
                if wrong:
                    return fail("output contains the example's output", "; ".join(wrong))
            if not effecting:
                result.status = PASSED
                return result
            if not contract.verify:
                return fail("verify", f"the contract has side effects{via} but names no verify")
            try:
                verify = resolve(contract.verify, tools_folder, project.tool_packages)
                happened = call_with_timeout(verify, (tool_input, output, call), timeout, f"verify of {contract.ref}")
            except Exception as exc:  # noqa: BLE001
                return fail("verify after invoke", _describe(exc))
            if not happened:
                return fail("verify after invoke", "verify says the effect did not happen right after the tool "
                                                   "returned")
            steps.append(("verify after invoke is true", True, ""))
            blind = "verify without the output (as after a crash or a timeout)"
            try:  # (new-user finding: a verify reading output[...] raised then, and the effect counted as not happened)
                found = call_with_timeout(verify, (tool_input, None, call), timeout, f"verify of {contract.ref}")
            except Exception as exc:  # noqa: BLE001
                return fail(blind, _describe(exc) + "; after a crash or a timeout verify gets output None: look the "
                                                    "effect up by call.idempotency_key")
            if not found:
                return fail(blind, "verify says the effect did not happen when it gets output None (as after a "
                                   "crash or a timeout): look the effect up by call.idempotency_key")
            steps.append(("verify without the output is true", True, ""))
            if not contract.compensate or contract.compensate == "none":
                steps.append(("compensate", True, f"none ({contract.reason or 'no reason given'})"))
                result.status = PASSED
                return result
            try:
                undo = resolve(contract.compensate, tools_folder, project.tool_packages)
                call_with_timeout(undo, (tool_input, output, call), timeout, f"compensate of {contract.ref}")
            except Exception as exc:  # noqa: BLE001
                return fail("compensate", _describe(exc))
            steps.append(("compensate", True, ""))
            try:
                still = call_with_timeout(verify, (tool_input, output, call), timeout, f"verify of {contract.ref}")
            except Exception as exc:  # noqa: BLE001
                return fail("verify after compensate", _describe(exc))
            if still:
                return fail("verify after compensate is false",
                            f"verify still says the effect happened: {contract.compensate} does not undo "
                            f"{contract.entrypoint}")
            steps.append(("verify after compensate is false", True, ""))
            try:
                call_with_timeout(undo, (tool_input, output, call), timeout, f"compensate of {contract.ref}")
            except Exception as exc:  # noqa: BLE001
                return fail("compensate again (idempotent)", _describe(exc))
            steps.append(("compensate again (idempotent)", True, ""))
            result.status = PASSED
            return result
    except Exception as exc:  # noqa: BLE001 - the sandbox itself failed to set up or tear down
        return fail(f"sandbox {result.sandbox}", _describe(exc))
    finally:
        result.seconds = time.perf_counter() - started


def _key(contract, tool_input) -> str:
    if contract.idempotency_key:
        from flowctl.expr.expressions import compile_expr

        try:
            value = compile_expr(contract.idempotency_key, contract.where("idempotency_key")).evaluate(
                {"input": tool_input, "run_input": tool_input, "run": {"id": "contract-test"}})
        except Exception:  # noqa: BLE001
            value = None
        if value not in (None, ""):
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return f"contract-test:{contract.id}:{uuid.uuid4().hex[:12]}"


def _parse(raw):
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        return json.loads(raw)
    return {} if raw is None else raw


def _describe(exc) -> str:
    name = getattr(exc, "error_type", None) or type(exc).__name__
    return f"{name}: {exc}"


__all__ = ["ContractResult", "run_contract_tests", "run_example", "contracts_to_test", "find_sandbox",
           "effect_functions", "side_effecting_as",
           "PASSED", "FAILED", "SKIPPED"]
