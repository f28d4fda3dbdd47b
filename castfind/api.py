"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

from typing import Any

from castfind import pipeline
from castfind.pipeline import ScanRun, open_index
from castfind.where import WhereResult
from castfind.where import where as _where

__all__ = ["ScanRun", "open_index", "scan", "where"]


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None, **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites."""
    index_options.setdefault("follow_installed", True)
    index = open_index(roots, **index_options)
    try:
        return _where(index, symbol, at)
    finally:
        index.save_stats()


def scan(
    paths: list[str],
    *,
    roots: list[str] | None = None,
    only: bool = False,
    rules: list[str] | None = None,
    entry_points: list[str] | None = None,
    fail_on: str | None = None,
    baseline: str | None = None,
    write_baseline: str | None = None,
    traces: list[str] | None = None,
    demand: bool = True,
    explain: bool = False,
    stops: bool = False,
    exclude: tuple[str, ...] = (),
    **index_options: Any,
) -> ScanRun:
    """Scan roots for whole-buffer casts; never prints.

    ``paths`` are the roots, or with ``only=True`` the files to report on (pre-commit passes the
    staged files; the roots then come from ``roots``, ``[tool.castfind] roots`` or the current folder).
    ``index_options`` are :class:`~castfind.pipeline.IndexOptions`' fields. Raises RuleError,
    ConfigError, BaselineError, DiscoveryError, OutputPathError or TraceError for bad input; output
    paths and ``--only`` files are checked before anything is parsed. ``explain``: an explanation per
    cast in ``ScanRun.explanations``; ``stops``: the table of where proofs stopped in ``ScanRun.stops``. The phases are in
    :mod:`castfind.pipeline`; the carried results are saved before ``post`` reads any trace, so a
    bad trace does not cost the next scan its warm start.
    """
    request = pipeline.ScanRequest(
        paths=tuple(paths), roots=tuple(roots or ()), only=only, rules=tuple(rules or ()),
        entry_points=tuple(entry_points or ()), fail_on=fail_on, baseline=baseline, write_baseline=write_baseline,
        traces=tuple(traces or ()), demand=demand, explain=explain, stops=stops, exclude=tuple(exclude),
        index=pipeline.IndexOptions(**index_options),
    )
    scan_plan = pipeline.plan(request)
    out = pipeline.run(scan_plan)
    pipeline.save_memo(scan_plan)
    return pipeline.post(scan_plan, out)
