"""``--format gitlab``: a GitLab Code Quality report (``artifacts:reports:codequality``).

A JSON array of issues with the fields GitLab reads: ``description``, ``check_name``,
``fingerprint``, ``severity`` (GitLab's words: ``info``, ``minor``, ``major``, ``critical``,
``blocker``) and ``location.path`` / ``location.lines.begin``; plus ``type`` and ``categories``
of the Code Climate issue format it derives from. The fingerprint is the baseline's
(:func:`castfind.analysis.findings.fingerprint`, no line number), so an issue survives code moving and
GitLab's merge-request widget shows only the issues a branch adds; a second identical cast in
the same function gets ``FP:2`` (:func:`~castfind.analysis.findings.occurrence_fingerprints`).
Paths are relative to the current folder (the checkout, in a job). Diagnostics are not issues
and are left out.
"""

from __future__ import annotations

import json
from typing import Any

from castfind.analysis.findings import occurrence_fingerprints
from castfind.core.types import Finding
from castfind.report import ReportContext, ScanReport, display_path

__all__ = ["SEVERITY", "render", "render_report", "to_list"]

#: castfind severity → GitLab Code Quality severity.
SEVERITY = {"error": "critical", "warning": "major", "info": "info"}


def _issue(f: Finding, occurrence: str) -> dict[str, Any]:
    fp, _, n = occurrence.rpartition(":")
    description = f"{f.rule} {f.message}"
    return {
        "type": "issue",
        "check_name": f.rule,
        "description": description,
        "categories": ["Performance"],
        "severity": SEVERITY.get(f.severity, "minor"),
        "fingerprint": fp if n == "1" else occurrence,
        "location": {"path": display_path(f.root, f.path), "lines": {"begin": max(f.line, 1)}},
    }


def to_list(report: ScanReport) -> list[dict[str, Any]]:
    """The issues as plain data, in the report's order."""
    fps = occurrence_fingerprints(list(report.findings))
    return [_issue(f, fp) for f, fp in zip(report.findings, fps, strict=True)]


def render(report: ScanReport) -> str:
    """The Code Quality report as a JSON document ending with a newline."""
    return json.dumps(to_list(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature; the context is not used."""
    return render(report)


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
