"""Reporters: one module per output format, all rendering the same :class:`ScanReport`.

``castfind.report.text``, ``castfind.report.json`` and ``castfind.report.sarif`` each
expose ``render(report, ...) -> str``. They build on ``Finding.to_dict()`` /
``Diagnostic.to_dict()`` (the one serialisation) and never print: the CLI writes the
string where it belongs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from castfind import sourcetext
from castfind.findings import BaselineEntry
from castfind.types import Diagnostic, Finding

__all__ = ["ScanReport", "SourceCache", "SourceLine"]

#: ``source_line(root, path, line)`` -> the text of that line, or ``None`` when unknown.
SourceLine = Callable[[str, str, int], "str | None"]


@dataclass(frozen=True, slots=True)
class ScanReport:
    """Everything a reporter needs about one scan.

    ``findings`` should already be ranked, suppressed and baselined (see
    :mod:`castfind.findings`); reporters keep the order they are given. ``stats`` is free
    form but these keys are understood: ``files`` (files scanned), ``suppressed`` (hidden
    by inline comments), ``baseline_hidden`` (hidden by the baseline). ``fixed`` holds
    baseline entries no longer found.
    """

    findings: tuple[Finding, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    fixed: tuple[BaselineEntry, ...] = ()

    def severity_counts(self) -> dict[str, int]:
        """Findings per severity, with every known severity present (possibly 0)."""
        counts = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        return counts


class SourceCache:
    """Reads source files once per scan for suppression checks and the text reporter.

    ``lines(root, path)`` raises ``OSError``/``UnicodeDecodeError`` so that
    :func:`castfind.findings.filter_suppressed` can turn them into diagnostics;
    ``line(root, path, n)`` is the lenient :data:`SourceLine` callback for display.
    """

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], list[str]] = {}

    def lines(self, root: str, path: str) -> list[str]:
        """The file's lines (without line endings); errors propagate."""
        key = (root, path)
        if not root:  # a cast measured outside the scanned roots (runtime.join): no source to read
            return []
        if key not in self._files:
            try:
                text = sourcetext.decode((Path(root) / path).read_bytes())
            except SyntaxError as e:  # an unknown codec named in the coding line
                raise UnicodeError(f"cannot decode: {e.msg}") from e
            self._files[key] = sourcetext.lines(text)
        return self._files[key]

    def line(self, root: str, path: str, number: int) -> str | None:
        """Line ``number`` (1-based) or ``None`` when it cannot be shown.

        Errors stop here on purpose: the source line is decoration in the text report, and
        a file that cannot be read was already reported as a diagnostic when it was
        scanned (or by ``filter_suppressed``).
        """
        try:
            lines = self.lines(root, path)
        except (OSError, UnicodeError):
            return None
        if 1 <= number <= len(lines):
            return lines[number - 1]
        return None
