"""What ``castfind scan`` writes around its report (:func:`scan_output`)."""

from __future__ import annotations

from typing import Protocol

from castfind.analysis.findings import exit_code
from castfind.core.names import shown
from castfind.report import ScanReport
from castfind.store.discover import Package, describe_packages


class FinishedScan(Protocol):
    """What :func:`scan_output` reads of a finished scan (:class:`castfind.pipeline.ScanRun`, a layer above)."""

    @property
    def report(self) -> ScanReport: ...
    @property
    def fail_on(self) -> str: ...
    @property
    def wrote_baseline(self) -> str | None: ...
    @property
    def packages(self) -> tuple[Package, ...]: ...


def scan_output(run: FinishedScan) -> tuple[list[str], list[str], int]:
    """Stderr's lines before the report (the packages indexed), those after it (the baseline
    written, files Python accepts that castfind could not analyse) and the exit code (2 for such
    files, else 0 when a baseline was written, else 1 when a finding is at or above ``--fail-on``); the report goes in between. Pure:
    :mod:`castfind.cli` and :mod:`castfind.quick` print it."""
    line = describe_packages(run.packages)
    head = [f"castfind: {line}"] if line is not None else []
    report = run.report
    tail = []
    if run.wrote_baseline:
        n = len(report.findings)
        tail.append(f"castfind: recorded {n} finding{'' if n == 1 else 's'} in {shown(str(run.wrote_baseline))}")
    unsupported = [d for d in report.diagnostics if d.kind == "unsupported"]
    if unsupported:
        tail.append(f"castfind: {len(unsupported)} file(s) Python accepts could not be analysed "
                    f"(first: {shown(unsupported[0].path)}); findings there may be missing — exit 2")
        return head, tail, 2
    if run.wrote_baseline:
        return head, tail, 0  # recording the findings is what was asked: it succeeded
    return head, tail, exit_code(report.findings, run.fail_on)
