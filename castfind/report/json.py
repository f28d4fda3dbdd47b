"""``--json``: the machine-readable report.

Exactly three top-level keys, ``findings``, ``diagnostics`` and ``stats``, so consumers
can rely on the shape. Each finding is ``Finding.to_dict()`` (``root``, and ``path`` relative to it) plus
``file``: the path every format shows, relative to the working directory (:mod:`castfind.core.paths`).
Baseline entries no longer found go in ``stats["baseline_fixed"]``
rather than a fourth key, and the per-step table of a scan that describes a deployment in ``stats["step"]``
(``rows``, ``total``, ``total_max``, ``unnumbered``).
"""

from __future__ import annotations

import json
from typing import Any

from castfind.report import ReportContext, ScanReport, display_path

__all__ = ["render", "render_report", "to_dict"]


def to_dict(report: ScanReport, *, statistics: bool = False) -> dict[str, Any]:
    """The report as plain JSON-ready data, built from each record's ``to_dict()``;
    ``statistics`` adds ``stats["statistics"]`` (:meth:`ScanReport.statistics`)."""
    stats = dict(report.stats)
    if statistics:
        stats["statistics"] = report.statistics().to_dict()
    if report.off_path:
        stats["off_path"] = dict(report.off_path)
    if report.fixed:
        stats["baseline_fixed"] = [entry.to_dict() for entry in report.fixed]
    if report.step is not None:  # a deployment was described: the per-step table, rows and total
        stats["step"] = report.step.to_dict()
    return {
        # ``file``: the path as every format shows it (castfind.core.paths); ``root`` and ``path`` as scanned.
        "findings": [{**f.to_dict(), "file": display_path(f.root, f.path)} for f in report.findings],
        "diagnostics": [d.to_dict() for d in report.diagnostics],
        "stats": stats,
    }


def render(report: ScanReport, *, indent: int | None = 2, statistics: bool = False) -> str:
    """The report as a JSON document ending with a newline.

    Values in ``stats`` that JSON cannot hold (a ``Path``, say) are written as strings
    rather than failing the whole report.
    """
    return json.dumps(to_dict(report, statistics=statistics), indent=indent, ensure_ascii=False, default=str, allow_nan=False) + "\n"


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """:func:`render` in the registry's signature; JSON uses only ``ctx.statistics``."""
    return render(report, statistics=ctx.statistics)


def owns(text: str) -> str | None:
    """``None`` when ``text`` is a JSON report castfind wrote (an object with findings, diagnostics and stats),
    else why not; what an existing ``--json-output`` file must be before it is replaced."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(doc, dict) or not {"findings", "diagnostics", "stats"} <= doc.keys():
        return "no findings, diagnostics and stats keys"
    return None
