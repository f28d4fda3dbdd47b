"""Join measured casts (trace sites) to static findings: what each flagged cast really costs.

A trace names files as the running interpreter saw them
(``/usr/lib/python3/site-packages/sglang/srt/x.py``) or sys.path-relative as the profiler
prints them (``sglang/srt/x.py``); a scan names them relative to the checkout
(``python/sglang/srt/x.py``). Both end in the module-relative path ``sglang/srt/x.py``,
which is what is matched, together with the line. Casts that no finding covers are not
dropped: they come back as ``CF900`` findings, sized by what they moved.

A trace path is never used to open a file. A ``CF900`` in a scanned file names that file
by its scan root and root-relative path (and only when its real path, symlinks resolved,
lies inside that root), so the report shows the line the scanner read. A cast measured in
a file outside the scanned roots is still reported, under the trace's path, with
``root=""``: a finding without a root has no source to show or to check for suppressions
(:class:`castfind.report.SourceCache` reads nothing for it). Trace strings are escaped
(:func:`~castfind.runtime.trace.clean_text`) before they go into a finding.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace

from castfind.core.rules import MEASURED_CAST
from castfind.core.types import SEVERITY_RANK, Finding, Runtime, Severity, TraceSite
from castfind.runtime.trace import clean_text, format_bytes, total_bytes

# CF900 is defined once, in castfind.core.rules; these names stay for callers that import them.
UNMATCHED_RULE = MEASURED_CAST.id
UNMATCHED_NAME = MEASURED_CAST.name
ERROR_BYTES = 64 * 1024 * 1024
WARNING_BYTES = 1024 * 1024


def join(
    findings: list[Finding], sites: list[TraceSite], modules: dict[str, str], roots: Sequence[str] = ()
) -> list[Finding]:
    """Attach a :class:`~castfind.core.types.Runtime` to each finding a trace site falls in; rank the result.

    ``modules`` maps each scanned file's root-relative path to its dotted module name. A
    site matches a finding in the same file whose ``line..end_line`` holds the site's line
    (the innermost such finding when they nest). Several sites on one finding (different
    shapes) add up; the largest shape is kept. Sites no finding covers become ``CF900``
    findings. Findings are returned by severity, then measured bytes (largest first), then
    path and line. ``roots`` are the scan roots (default: those of ``findings``); a ``CF900``
    in a scanned file gets the root that really holds it, or ``""`` (no source) when none
    does. The inputs are not changed and no file is read; paths are only resolved.
    """
    files = _FileIndex(modules, findings)
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.path, []).append(finding)
    attached: dict[int, list[TraceSite]] = {}
    unmatched: dict[tuple[str, int, str, bool], list[TraceSite]] = {}
    for site in sites:
        rel = files.resolve(site.path)
        target = _match(site, by_file.get(rel, [])) if rel is not None else None
        if target is not None:
            attached.setdefault(id(target), []).append(site)
        else:
            unmatched.setdefault((rel or site.path, site.line, site.function, rel is not None), []).append(site)
    joined = [replace(f, runtime=_runtime(attached[id(f)])) if id(f) in attached else f for f in findings]
    candidates = tuple(roots) or tuple(dict.fromkeys(f.root for f in findings if f.root))
    for (path, line, function, scanned), group in unmatched.items():
        module = files.modules.get(path, "") if scanned else ""
        root = root_holding(path, candidates) if scanned else ""
        joined.append(_unmatched(path, line, function, group, root, module))
    return sorted(joined, key=_rank)


def root_holding(rel: str, roots: Sequence[str]) -> str:
    """The first root whose real path holds the file ``rel`` (symlinks resolved), or ``""`` when none does."""
    for root in roots:
        real_root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(root, rel))
        if os.path.commonpath([real_root, real]) == real_root and os.path.isfile(real):
            return root
    return ""


def _rank(finding: Finding) -> tuple[int, int, str, int, int]:
    measured = finding.runtime.bytes_total if finding.runtime else 0
    return (SEVERITY_RANK.get(finding.severity, len(SEVERITY_RANK)), -measured, finding.path, finding.line, finding.column)


class _FileIndex:
    """Maps a trace path to a scanned file by the longest module-relative (or root-relative) suffix."""

    def __init__(self, modules: dict[str, str], findings: Iterable[Finding]) -> None:
        self.suffixes: dict[str, str] = {}
        self.modules = dict(modules)
        for finding in findings:
            if not self.modules.get(finding.path):
                self.modules[finding.path] = finding.module
        for rel, module in self.modules.items():
            self.suffixes[rel] = rel
            if module:
                tail = "/__init__.py" if rel.endswith("/__init__.py") or rel == "__init__.py" else ".py"
                self.suffixes.setdefault(module.replace(".", "/") + tail, rel)

    def resolve(self, trace_path: str) -> str | None:
        parts = trace_path.replace("\\", "/").split("/")
        for start in range(len(parts)):  # longest suffix first: the most specific match wins
            rel = self.suffixes.get("/".join(parts[start:]))
            if rel is not None:
                return rel
        return None


def _match(site: TraceSite, candidates: list[Finding]) -> Finding | None:
    covering = [f for f in candidates if f.line <= site.line <= max(f.end_line, f.line)]
    if covering:
        return min(covering, key=lambda f: (max(f.end_line, f.line) - f.line, -f.line, f.column))
    if site.extra.get("line_kind") == "def":
        # The profiler gave only the function's first line: take the function's one finding, if it has one.
        name = site.function.rsplit(".", 1)[-1]
        inside = [f for f in candidates if f.function.rsplit(".", 1)[-1] == name and f.line >= site.line]
        if len(inside) == 1:
            return inside[0]
    return None


def _largest(group: list[TraceSite]) -> TraceSite:
    return max(group, key=lambda s: (math.prod(s.shape), s.bytes_per_call, total_bytes(s)))


def _runtime(group: list[TraceSite]) -> Runtime:
    """Several records at one site: sum calls, bytes and device time; describe the largest shape."""
    big = _largest(group)
    calls = sum(s.calls for s in group)
    times = [s.device_time_us for s in group if s.device_time_us is not None]
    steps = max((s.steps for s in group if s.steps), default=None)
    return Runtime(
        calls=calls,
        shape=big.shape,
        src_dtype=clean_text(big.src_dtype),
        dst_dtype=clean_text(big.dst_dtype),
        bytes_per_call=max(s.bytes_per_call for s in group),
        bytes_total=sum(total_bytes(s) for s in group),
        device=clean_text(big.device),
        device_time_us=round(sum(times), 3) if times else None,
        calls_per_step=round(calls / steps, 3) if steps else None,
    )


def severity_for(bytes_per_call: int) -> Severity:
    """CF900's severity: ≥ 64 MiB per call is an error, ≥ 1 MiB a warning, less is info."""
    if bytes_per_call >= ERROR_BYTES:
        return "error"
    if bytes_per_call >= WARNING_BYTES:
        return "warning"
    return "info"


def _unmatched(path: str, line: int, function: str, group: list[TraceSite], root: str, module: str) -> Finding:
    runtime = _runtime(group)
    shape = "[" + ", ".join(str(d) for d in runtime.shape) + "]"
    message = (
        f"measured: {runtime.calls} calls of {runtime.src_dtype}→{runtime.dst_dtype} {shape}, "
        f"{format_bytes(runtime.bytes_per_call)} per call"
    )
    return Finding(
        rule=UNMATCHED_RULE,
        name=UNMATCHED_NAME,
        severity=severity_for(runtime.bytes_per_call),
        root=root,
        path=clean_text(path),
        line=line,
        end_line=line,
        column=1,
        function=clean_text(function),
        expr="",
        message=message,
        runtime=runtime,
        module=module,
    )
