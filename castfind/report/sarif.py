"""``--sarif``: SARIF 2.1.0 for code-scanning UIs (GitHub code scanning, VS Code SARIF viewer).

One run. ``tool.driver.rules`` lists every rule the scan ran with (so a UI knows a rule
even when it found nothing) plus any rule id a finding uses that those lack.
Each result points at its file relative to the top of the git repository holding its scan root (found by
walking up to a ``.git`` entry, without running git; else the working directory) through a ``uriBaseId``
(``SRCROOT``; ``SRCROOT2``, ... for roots in further repositories, or outside the working directory when
there is no repository), as GitHub code scanning reads a relative URI against the repository's root;
``originalUriBaseIds`` gives each base as a ``file://`` URI ending in ``/``. Each result carries a
``partialFingerprints`` entry built from :func:`castfind.analysis.findings.fingerprint`, which
leaves the line number out, so an alert survives code moving up or down. Diagnostics
become ``invocations[0].toolExecutionNotifications``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from castfind.analysis.findings import occurrence_fingerprints
from castfind.core.paths import repository_top
from castfind.core.types import Diagnostic, Finding
from castfind.core.versions import __version__
from castfind.report import ReportContext, RuleDescription, RuleInfo, ScanReport

__all__ = ["FINGERPRINT_KEY", "SARIF_SCHEMA", "SARIF_VERSION", "render", "render_report", "to_dict"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: Versioned key, as SARIF §3.27.17 recommends, so a future fingerprint scheme can coexist.
FINGERPRINT_KEY = "castfind/v1"
INFORMATION_URI = "https://github.com/castfind/castfind"

# SARIF has no "info"; "note" is its lowest level that still shows as a result.
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _level(severity: str) -> str:
    return _LEVEL.get(severity, "warning")


def _title(name: str, rule_id: str) -> str:
    # "whole-kv-cache-cast-on-hot-path" -> "Whole kv cache cast on hot path"
    if not name:
        return rule_id
    words = name.replace("_", "-").split("-")
    text = " ".join(w for w in words if w)
    return text[:1].upper() + text[1:]


def _rule(rule: RuleInfo) -> dict[str, Any]:
    rule_id, name, message, fix = rule.id, rule.name, rule.message, rule.fix
    title = _title(name, rule_id)
    # The message is a template ("{expr} casts the whole {buffer} ..."); show its fields
    # as <expr> so the description reads as prose in a rule list.
    full = _PLACEHOLDER.sub(r"<\1>", message) if message else title
    descriptor: dict[str, Any] = {
        "id": rule_id,
        "name": name or rule_id,
        "shortDescription": {"text": title},
        "fullDescription": {"text": full},
        "defaultConfiguration": {"level": _level(rule.severity)},
        "helpUri": rule.help_uri or INFORMATION_URI,
        "properties": {"tags": ["performance", "dtype"]},
    }
    help_text = fix or full
    descriptor["help"] = {"text": help_text, "markdown": help_text}
    return descriptor


def _rule_table(
    findings: tuple[Finding, ...], rules: Iterable[RuleInfo]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    known: dict[str, RuleInfo] = {r.id: r for r in rules}
    for f in findings:
        # A finding whose rule the caller did not describe still needs a descriptor for
        # ruleIndex to point at; its own fields describe it well enough.
        known.setdefault(f.rule, RuleDescription(f.rule, f.name, f.severity, "", f.fix))
    ids = sorted(known)
    return [_rule(known[rule_id]) for rule_id in ids], {rule_id: i for i, rule_id in enumerate(ids)}


def _base_folder(root: str) -> str:
    """The folder a finding of ``root`` is named relative to: the repository top holding ``root``
    (:func:`castfind.core.paths.repository_top`), else the working directory; ``root`` itself when it lies
    outside that folder (a URI relative to a base must not climb out of it)."""
    absolute = os.path.abspath(root)
    base = repository_top(absolute) or os.getcwd()
    return base if Path(absolute).is_relative_to(base) else absolute


def _base_ids(findings: tuple[Finding, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """Each finding's root → its base folder, and each base folder → its ``uriBaseId`` (``SRCROOT``, then
    ``SRCROOT2``, ...), in the order findings name them."""
    folders: dict[str, str] = {}
    ids: dict[str, str] = {}
    for f in findings:
        if f.root not in folders:
            folders[f.root] = folder = _base_folder(f.root)
            ids.setdefault(folder, "SRCROOT" if not ids else f"SRCROOT{len(ids) + 1}")
    return folders, ids


def _root_uri(folder: str) -> str:
    # SARIF §3.14.14: a uriBaseId's uri must end with "/" to act as a base.
    uri = Path(folder).absolute().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _relative_uri(path: str) -> str:
    return quote(PurePosixPath(path.replace("\\", "/")).as_posix(), safe="/")


def _uri_in(folder: str, root: str, path: str) -> str:
    """The URI of ``root/path`` relative to ``folder`` (which holds ``root``)."""
    return _relative_uri(os.path.relpath(os.path.normpath(os.path.join(os.path.abspath(root), path)), folder))


def _region(line: int, column: int | None = None, end_line: int | None = None) -> dict[str, int] | None:
    if line < 1:
        return None  # SARIF requires startLine >= 1; a line-less diagnostic has no region.
    region = {"startLine": line}
    if column is not None and column >= 1:
        region["startColumn"] = column
    if end_line is not None and end_line >= line:
        region["endLine"] = end_line
    return region


def _result(f: Finding, index: int, fp: str, folder: str, base_id: str) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri_in(folder, f.root, f.path), "uriBaseId": base_id}}
    region = _region(f.line, f.column, f.end_line)
    if region is not None:
        physical["region"] = region
    location: dict[str, Any] = {"physicalLocation": physical}
    if f.function:
        location["logicalLocations"] = [{"fullyQualifiedName": f.function, "kind": "function"}]
    properties: dict[str, Any] = {"function": f.function, "expr": f.expr}
    if f.hot_path:
        properties["hotPath"] = list(f.hot_path)
    if f.provenance:
        properties["provenance"] = list(f.provenance)
    if f.conditions:
        properties["conditions"] = [c.to_dict() for c in f.conditions]
    if f.guess is not None:
        properties["guess"] = f.guess.to_dict()
    if f.off_path:
        properties["offPath"] = f.off_path
    if f.runtime is not None:
        properties["runtime"] = f.runtime.to_dict()
    if f.cost is not None:
        properties["cost"] = f.cost.to_dict()
    text = f.message + (f" Fix: {f.fix}" if f.fix else "")
    return {
        "ruleId": f.rule,
        "ruleIndex": index,
        "level": _level(f.severity),
        "message": {"text": text},
        "locations": [location],
        "partialFingerprints": {FINGERPRINT_KEY: fp},
        "properties": properties,
    }


def _notification(d: Diagnostic) -> dict[str, Any]:
    note: dict[str, Any] = {
        "level": "warning" if d.kind == "cache" else "error",
        "message": {"text": d.message},
        "descriptor": {"id": d.kind or "error"},
    }
    if d.path:
        posix = d.path.replace("\\", "/")
        uri = Path(d.path).as_uri() if Path(d.path).is_absolute() else _relative_uri(posix)
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri}}
        region = _region(d.line)
        if region is not None:
            physical["region"] = region
        note["locations"] = [{"physicalLocation": physical}]
    return note


def to_dict(report: ScanReport, rules: Iterable[RuleInfo] = ()) -> dict[str, Any]:
    """The SARIF log as plain data; ``rules`` (:class:`castfind.core.rules.Rule` objects, say) are
    described in ``tool.driver.rules``, a later one of the same id winning."""
    descriptors, rule_index = _rule_table(report.findings, rules)
    folders, bases = _base_ids(report.findings)
    fps = occurrence_fingerprints(list(report.findings))
    results = [
        _result(f, rule_index[f.rule], fp, folders[f.root], bases[folders[f.root]])
        for f, fp in zip(report.findings, fps, strict=True)
    ]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "castfind",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": descriptors,
            }
        },
        "invocations": [
            {
                # Diagnostics do not stop a scan (design §2), so the run itself succeeded.
                "executionSuccessful": True,
                "toolExecutionNotifications": [_notification(d) for d in report.diagnostics],
            }
        ],
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    if bases:
        run["originalUriBaseIds"] = {base: {"uri": _root_uri(folder)} for folder, base in bases.items()}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def _document(log: dict[str, Any]) -> str:
    return json.dumps(log, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render(report: ScanReport, rules_meta: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The SARIF log as a JSON document ending with a newline, for callers holding rule metadata
    as plain data: ``rules_meta`` maps a rule id to ``{"name", "message", "fix", "severity", "help_uri"}``
    (the rule file's fields); missing keys are tolerated."""
    meta = rules_meta or {}
    return _document(to_dict(report, [RuleDescription.from_mapping(rule_id, m) for rule_id, m in meta.items()]))


def render_report(report: ScanReport, ctx: ReportContext) -> str:
    """The SARIF log in the registry's signature: rules are described from ``ctx.rules``."""
    return _document(to_dict(report, ctx.rules))


def owns(text: str) -> str | None:
    """``None`` when ``text`` is a SARIF log castfind wrote (every run's tool driver is castfind), else why not."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        return "no runs"
    for run in runs:
        tool = run.get("tool") if isinstance(run, dict) else None
        driver = tool.get("driver") if isinstance(tool, dict) else None
        if not isinstance(driver, dict) or driver.get("name") != "castfind":
            return "a run whose tool is not castfind"
    return None
