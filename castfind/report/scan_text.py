"""What ``castfind scan`` writes around its report (:func:`scan_output`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from castfind.analysis.findings import exit_code
from castfind.core.names import shown

if TYPE_CHECKING:
    from castfind.pipeline import ScanRun


def scan_output(run: ScanRun) -> tuple[list[str], list[str], int]:
    """Stderr's lines before the report (the packages indexed), those after it (the baseline
    written, files Python accepts that castfind could not analyse) and the exit code (2 for such
    files, else 1 when a finding is at or above ``--fail-on``); the report goes in between. Pure:
    :mod:`castfind.cli` and :mod:`castfind.quick` print it."""
    from castfind.store.discover import describe_packages

    line = describe_packages(run.packages)
    head = [f"castfind: {line}"] if line is not None else []
    report = run.report
    tail = []
    if run.wrote_baseline:
        tail.append(f"castfind: wrote {len(report.findings)} finding(s) to {shown(str(run.wrote_baseline))}")
    unsupported = [d for d in report.diagnostics if d.kind == "unsupported"]
    if unsupported:
        tail.append(f"castfind: {len(unsupported)} file(s) Python accepts could not be analysed "
                    f"(first: {shown(unsupported[0].path)}); findings there may be missing — exit 2")
        return head, tail, 2
    return head, tail, exit_code(report.findings, run.fail_on)
