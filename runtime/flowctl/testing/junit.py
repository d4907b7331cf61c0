"""JUnit XML of ``flowctl test`` results, the format CI systems (GitHub Actions reporters, GitLab,
Jenkins) read: one ``<testsuite>`` per flow (``flowctl.<flow>``) and one for contract tests
(``flowctl.contracts``); a failed case is a ``<failure>`` whose text is the path diff, a case that
could not run an ``<error>``, a skipped contract a ``<skipped>``."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from flowctl.testing.runner import ERROR, FAILED


def build(case_results=(), contract_results=(), coverages=None) -> ET.ElementTree:
    root = ET.Element("testsuites", name="flowctl test")
    suites: dict = {}
    for r in case_results:
        suite = suites.get(r.case.flow)
        if suite is None:
            suite = suites[r.case.flow] = ET.SubElement(root, "testsuite", name=f"flowctl.{r.case.flow}")
        tc = ET.SubElement(suite, "testcase", classname=f"flowctl.{r.case.flow}", name=r.case.name,
                           file=r.case.file, time=f"{r.seconds:.3f}")
        if r.status == FAILED:
            first = r.diff.splitlines()[0] if r.diff else (r.problems or ["failed"])[0]
            ET.SubElement(tc, "failure", message=_clean(first.splitlines()[0]), type="GoldenPathMismatch").text = \
                _clean(r.report())
        elif r.status == ERROR:
            first = (r.problems or ["the case could not run"])[0]
            ET.SubElement(tc, "error", message=_clean(first.splitlines()[0]), type="CaseError").text = _clean(r.report())
        out = f"path: {' → '.join(r.path)}\nstatus: {r.run_status}"
        ET.SubElement(tc, "system-out").text = _clean(out)
    if contract_results:
        suite = ET.SubElement(root, "testsuite", name="flowctl.contracts")
        for r in contract_results:
            tc = ET.SubElement(suite, "testcase", classname=f"flowctl.contracts.{r.contract.id}", name=r.name,
                               file=r.contract.file, time=f"{r.seconds:.3f}")
            if r.status == "failed":
                failed = next((s for s in r.steps if not s[1]), ("contract test", False, r.message))
                ET.SubElement(tc, "failure", message=_clean(f"{failed[0]}: {failed[2]}"),
                              type="ContractViolation").text = _clean(r.report())
            elif r.status == "skipped":
                ET.SubElement(tc, "skipped", message=_clean(r.message))
    for suite in root:
        cases = list(suite.iter("testcase"))
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
        suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
        suite.set("time", f"{sum(float(c.get('time', 0)) for c in cases):.3f}")
        cov = (coverages or {}).get(suite.get("name", "").removeprefix("flowctl."))
        if cov is not None:
            props = ET.Element("properties")
            for kind in cov.items:
                done, total, pct = cov.figure(kind)
                ET.SubElement(props, "property", name=f"coverage.{kind.replace(' ', '_')}", value=f"{done}/{total} {pct:.1f}%")
            suite.insert(0, props)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, 0)) for s in root)))
    root.set("time", f"{sum(float(s.get('time', 0)) for s in root):.3f}")
    return ET.ElementTree(root)


def write(path, case_results=(), contract_results=(), coverages=None) -> None:
    tree = build(case_results, contract_results, coverages)
    ET.indent(tree)
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    tree.write(target, encoding="utf-8", xml_declaration=True)


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, even escaped: drop them."""
    return "".join(ch for ch in str(text)
                   if ch in "\t\n\r" or (0x20 <= ord(ch) and not 0xD800 <= ord(ch) <= 0xDFFF and ord(ch) not in (0xFFFE, 0xFFFF)))


__all__ = ["build", "write"]
