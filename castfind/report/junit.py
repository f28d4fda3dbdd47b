"""``--format junit``: JUnit XML, for CI systems that only read test reports.

One ``<testsuite name="castfind">`` inside ``<testsuites>``; one ``<testcase>`` per finding. A finding at or
above ``--fail-on`` (what makes the exit code 1) has a ``<failure>`` (``type`` = the rule id, ``message`` =
the finding's message, the text = where it is, its hot path, provenance and fix); one below it is a passing
test case whose ``<system-out>`` holds the same text, so ``failures`` counts exactly the findings that fail
the build. A scan without findings is an empty, passing suite. Diagnostics go to the suite's
``<system-err>``. The attributes are those of the JUnit schema CI systems validate against (Jenkins' ``junit-10.xsd``:
``testcase`` has ``name``, ``classname`` and ``time``, nothing else), so tests/schemas/junit.xsd checks it.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from castfind.analysis.findings import fails
from castfind.core.names import shown
from castfind.core.types import Finding
from castfind.report import ReportContext, ScanReport, display_path

__all__ = ["render", "render_report"]

# XML 1.0 forbids most control characters even escaped; a message never needs them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _details(f: Finding, where: str) -> str:
    lines = [f"{where}:{f.line}:{f.column}: {f.rule} {f.severity} {f.message}", f"expression: {f.expr}"]
    if f.function:
        lines.append(f"function: {shown(f.function)}")
    if f.hot_path:
        lines.append("hot path: " + " → ".join(map(shown, f.hot_path)))  # module names: file names
    if f.provenance:
        lines.append("provenance: " + " → ".join(map(shown, f.provenance)))
    if f.runtime is not None:
        rt = f.runtime
        lines.append(f"measured: {rt.calls} call(s) × {rt.bytes_per_call} B = {rt.bytes_total} B")
    if f.fix:
        lines.append(f"fix: {f.fix}")
    return _clean("\n".join(lines))


def _testcase(f: Finding, failing: bool) -> ET.Element:
    where = shown(display_path(f.root, f.path))
    case = ET.Element("testcase", {
        "name": _clean(f"{f.rule} {where}:{f.line}"),
        "classname": _clean(shown(f.module) or where.removesuffix(".py").replace("/", ".")),
        "time": "0",
    })
    if failing:
        failure = ET.SubElement(case, "failure", {"type": f.rule, "message": _clean(f.message)})
        failure.text = _details(f, where)
    else:
        ET.SubElement(case, "system-out").text = _details(f, where)
    return case


def render(report: ScanReport, fail_on: str = "error") -> str:
    """The JUnit document (XML declaration included), ending with a newline; the findings at or above
    ``fail_on`` are failures."""
    failing = [fails([f], fail_on) for f in report.findings]
    n, failures = str(len(report.findings)), str(sum(failing))
    suites = ET.Element("testsuites", {"name": "castfind", "tests": n, "failures": failures, "errors": "0"})
    seconds = report.stats.get("seconds")
    suite = ET.SubElement(suites, "testsuite", {"name": "castfind", "tests": n, "failures": failures, "errors": "0",
                                                "skipped": "0"})
    if isinstance(seconds, int | float):
        suites.set("time", f"{seconds:.3f}")
        suite.set("time", f"{seconds:.3f}")
    suite.extend(_testcase(f, bad) for f, bad in zip(report.findings, failing, strict=True))
    if report.diagnostics:
        err = ET.SubElement(suite, "system-err")
        err.text = _clean("\n".join(str(d) for d in report.diagnostics))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature, failing at the context's ``fail_on``."""
    return render(report, ctx.fail_on)


def owns(text: str) -> str | None:
    """``None`` when ``text`` is JUnit XML castfind wrote (``<testsuites name="castfind">``), else why not."""
    head = text.lstrip()[:4096]
    if head.startswith("<") and re.search(r'<testsuites\s+name="castfind"', head):
        return None
    return 'no <testsuites name="castfind">'
