"""Reporters: one module per output format, all rendering the same :class:`ScanReport`.

``castfind.report.text``, ``castfind.report.json`` and ``castfind.report.sarif`` each
expose ``render_report(report, ctx) -> str`` (the :data:`Render` signature, what
:mod:`castfind.report.registry` lists by format name) next to a ``render`` that takes just
what that format uses. They build on ``Finding.to_dict()`` / ``Diagnostic.to_dict()``
(the one serialisation) and never print: the CLI writes the string where it belongs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from castfind.core import sourcetext
from castfind.core.paths import display_path
from castfind.core.types import Diagnostic, Finding, StepTable

if TYPE_CHECKING:
    from castfind.analysis.findings import BaselineEntry

__all__ = ["Render", "ReportContext", "RuleCount", "RuleDescription", "RuleInfo", "ScanReport", "SourceCache", "SourceLine",
           "Statistics", "display_path"]

#: ``source_line(root, path, line)`` -> the text of that line, or ``None`` when unknown.
SourceLine = Callable[[str, str, int], "str | None"]


class RuleInfo(Protocol):
    """What a reporter may say about a rule. :class:`castfind.core.rules.Rule` is one, so reporters
    describe rules from the loaded rule set rather than from a dict copied out of it."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def fix(self) -> str: ...
    @property
    def help_uri(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RuleDescription:
    """A :class:`RuleInfo` without a rule file behind it: a rule known only from its findings,
    or rule metadata handed over as plain data (``sarif.render``'s ``rules_meta``)."""

    id: str
    name: str = ""
    severity: str = "warning"
    message: str = ""
    fix: str = ""
    help_uri: str | None = None

    @classmethod
    def from_mapping(cls, rule_id: str, meta: Mapping[str, Any]) -> RuleDescription:
        """From ``{"name", "message", "fix", "severity", "help_uri"}``; a missing or empty key is tolerated."""
        return cls(rule_id, str(meta.get("name", "") or ""), str(meta.get("severity", "warning")),
                   str(meta.get("message", "") or ""), str(meta.get("fix", "") or ""),
                   str(meta.get("help_uri") or "") or None)


@dataclass(frozen=True, slots=True)
class ReportContext:
    """What a reporter may use besides the report itself; each format takes what it needs.

    ``rules`` are every rule the scan ran with (CF900 included), so a format that lists rules
    (SARIF) knows those that found nothing. ``source_line`` shows the flagged line (``None``:
    not shown). ``color``: ANSI colour, decided by the caller (``text.wants_color``: ``--color``, ``NO_COLOR``, ``FORCE_COLOR``, a tty).
    ``statistics``: formats that can add :meth:`ScanReport.statistics` do.
    """

    rules: tuple[RuleInfo, ...] = ()
    source_line: SourceLine | None = None
    color: bool = False
    #: ``--statistics``: counts per rule and severity and the top files (text: instead of the
    #: findings, as ruff's ``--statistics``; JSON: ``stats["statistics"]``, next to the findings).
    statistics: bool = False
    #: ``--fail-on``: findings at or above it fail the build; formats that tell failing from passing
    #: (JUnit's failures, GitLab's severities) follow it, as the exit code does.
    fail_on: str = "error"


@dataclass(frozen=True, slots=True)
class ScanReport:
    """Everything a reporter needs about one scan.

    ``findings`` should already be ranked, suppressed and baselined (see
    :mod:`castfind.analysis.findings`); reporters keep the order they are given. ``stats`` is free
    form but these keys are understood: ``files`` (files scanned), ``suppressed`` (hidden
    by inline comments), ``baseline_hidden`` (hidden by the baseline). ``fixed`` holds
    baseline entries no longer found.
    """

    findings: tuple[Finding, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    fixed: tuple[BaselineEntry, ...] = ()
    #: Findings left out as off the deployment's path, per kind (``branch``: a false branch test; ``model``:
    #: not this model's code); shown with ``--all-paths`` / ``--all-models``.
    off_path: Mapping[str, int] = field(default_factory=dict)
    #: The per-step table (:func:`castfind.analysis.cost.step_table`), when the scan describes a deployment
    #: (a deployment flag: ``pipeline.deployment_given``); None otherwise, and no format shows one.
    step: StepTable | None = None

    def severity_counts(self) -> dict[str, int]:
        """Findings per severity, with every known severity present (possibly 0)."""
        counts = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        return counts

    def statistics(self, top: int = 10) -> Statistics:
        """``--statistics``: findings per rule (with its severity) and the ``top`` files with most findings."""
        rules: dict[tuple[str, str, str], int] = {}
        files: dict[str, int] = {}
        for f in self.findings:
            key = (f.rule, f.name, f.severity)
            rules[key] = rules.get(key, 0) + 1
            where = display_path(f.root, f.path)
            files[where] = files.get(where, 0) + 1
        by_rule = tuple(RuleCount(rule, name, sev, n)
                        for (rule, name, sev), n in sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])))
        by_file = tuple(sorted(files.items(), key=lambda kv: (-kv[1], kv[0]))[:max(top, 0)])
        return Statistics(by_rule, self.severity_counts(), by_file)


@dataclass(frozen=True, slots=True)
class RuleCount:
    """One row of :class:`Statistics`: a rule and how many findings it has."""

    rule: str
    name: str
    severity: str
    count: int


@dataclass(frozen=True, slots=True)
class Statistics:
    """Counts per rule (most first), per severity, and the files with most findings (most first)."""

    rules: tuple[RuleCount, ...]
    severities: Mapping[str, int]
    files: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``stats["statistics"]``)."""
        return {
            "rules": [{"rule": r.rule, "name": r.name, "severity": r.severity, "count": r.count} for r in self.rules],
            "severities": dict(self.severities),
            "files": [{"path": path, "count": n} for path, n in self.files],
        }


#: The one signature of a reporter: the report and its context in, the whole document out.
Render = Callable[[ScanReport, ReportContext], str]


class SourceCache:
    """Reads source files once per scan for suppression checks and the text reporter.

    ``lines(root, path)`` raises ``OSError``/``UnicodeDecodeError`` so that
    :func:`castfind.analysis.findings.filter_suppressed` can turn them into diagnostics;
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
