"""``--format gitlab``: a GitLab Code Quality report (``artifacts:reports:codequality``).

A JSON array of issues with the fields GitLab reads: ``description``, ``check_name``,
``fingerprint``, ``severity`` (GitLab's words: ``info``, ``minor``, ``major``, ``critical``,
``blocker``) and ``location.path`` / ``location.lines.begin``; plus ``type`` and ``categories``
of the Code Climate issue format it derives from. The fingerprint is the baseline's
(:func:`castfind.analysis.findings.fingerprint`, no line number), so an issue survives code moving and
GitLab's merge-request widget shows only the issues a branch adds; a second identical cast in
the same function gets ``FP:2`` (:func:`~castfind.analysis.findings.occurrence_fingerprints`).
Severities follow ``--fail-on``: a finding at or above it (one that makes the exit code 1) is
``critical`` (an error) or ``major``; one below it is ``minor`` (a warning) or ``info``, so GitLab's
widget ranks as blocking exactly what fails the job.
Paths are relative to the current folder (the checkout, in a job). Diagnostics are not issues
and are left out.
"""

from __future__ import annotations

import json
from typing import Any

from castfind.analysis.findings import fails, occurrence_fingerprints
from castfind.core.types import Finding
from castfind.report import ReportContext, ScanReport, display_path

__all__ = ["BLOCKING", "SEVERITY", "render", "render_report", "severity", "to_list"]

#: castfind severity → GitLab Code Quality severity, for a finding that fails the build.
SEVERITY = {"error": "critical", "warning": "major", "info": "major"}
#: castfind severity → GitLab Code Quality severity, for a finding below ``--fail-on``.
PASSING = {"error": "minor", "warning": "minor", "info": "info"}
#: The GitLab severities of findings that fail the build.
BLOCKING = frozenset(SEVERITY.values())


def severity(f: Finding, fail_on: str = "error") -> str:
    """The GitLab severity of ``f``: blocking (:data:`BLOCKING`) exactly when it is at or above ``fail_on``."""
    return (SEVERITY if fails([f], fail_on) else PASSING).get(f.severity, "minor")


def _issue(f: Finding, occurrence: str, fail_on: str) -> dict[str, Any]:
    fp, _, n = occurrence.rpartition(":")
    description = f"{f.rule} {f.message}"
    return {
        "type": "issue",
        "check_name": f.rule,
        "description": description,
        "categories": ["Performance"],
        "severity": severity(f, fail_on),
        "fingerprint": fp if n == "1" else occurrence,
        "location": {"path": display_path(f.root, f.path), "lines": {"begin": max(f.line, 1)}},
    }


def to_list(report: ScanReport, fail_on: str = "error") -> list[dict[str, Any]]:
    """The issues as plain data, in the report's order."""
    fps = occurrence_fingerprints(list(report.findings))
    return [_issue(f, fp, fail_on) for f, fp in zip(report.findings, fps, strict=True)]


def render(report: ScanReport, fail_on: str = "error") -> str:
    """The Code Quality report as a JSON document ending with a newline."""
    return json.dumps(to_list(report, fail_on), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature, with the context's ``fail_on``."""
    return render(report, ctx.fail_on)


def owns(text: str) -> str | None:
    """``None`` when ``text`` is a Code Quality report castfind wrote (a list of its issues), else why not."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    keys = {"type", "check_name", "description", "fingerprint", "location"}
    if not isinstance(doc, list) or not all(isinstance(i, dict) and keys <= i.keys() for i in doc):
        return "not a list of Code Quality issues"
    return None
