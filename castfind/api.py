"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from castfind import pipeline
from castfind.core.config import load_config
from castfind.core.fsutil import Owns
from castfind.core.heap import survivors_frozen
from castfind.pipeline import ScanRun, open_index
from castfind.where.lookup import DEFAULT_PARSE_BUDGET, WhereResult
from castfind.where.lookup import where as _where

__all__ = ["ScanRun", "open_index", "scan", "where"]


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None,
          report_exclude: tuple[str, ...] | None = None, budget: int | None = DEFAULT_PARSE_BUDGET,
          **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites.

    Call sites in files that ``report_exclude`` matches (default: the first root's
    ``[tool.castfind] report-exclude``) are marked as test call sites. ``budget``: bytes of uncached
    source the lookup may parse for aliases and call sites (None: no limit; the files left are
    named in an ``unresolved`` entry). Raises ConfigError.
    """
    if report_exclude is None:
        first = Path(roots[0]) if roots else Path(".")
        report_exclude = load_config(first if first.is_dir() else first.parent).report_exclude
    index_options.setdefault("follow_installed", True)
    index = open_index(roots, **index_options)
    try:
        return _where(index, symbol, at, report_exclude, budget)
    finally:
        index.save()


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
    warn_unused_ignores: bool = True,
    baseline_commit: str | None = None,
    include_tests: bool = False,
    sets: list[tuple[str, str]] | None = None,
    model_config: str | None = None,
    kv_tokens: int | None = None,
    kv_cache_dtype: str | None = None,
    outputs: list[tuple[str, str, str, Owns | None]] | None = None,
    **index_options: Any,
) -> ScanRun:
    """Scan roots for whole-buffer casts; never prints.

    ``paths`` are the roots, or with ``only=True`` the files to report on (pre-commit passes the
    staged files; the roots then come from ``roots``, ``[tool.castfind] roots`` or the current folder).
    ``index_options`` are :class:`~castfind.pipeline.IndexOptions`' fields. Raises RuleError,
    ConfigError, BaselineError, DiscoveryError, OutputPathError or TraceError for bad input; output
    paths and ``--only`` files are checked before anything is parsed. ``explain``: an explanation per
    cast in ``ScanRun.explanations``; ``stops``: the table of where proofs stopped in ``ScanRun.stops``.
    ``warn_unused_ignores``: report ignore comments that silence nothing (CF001). ``baseline_commit``: report only
    findings new relative to that git commit (GitRefError when the roots are in no repository or it names no
    commit; checked before parsing).     ``include_tests``: report findings in every file, tests and benchmarks too (by default those the
    configuration's ``report-exclude`` matches are set aside and counted). ``sets``, ``model_config``,
    ``kv_tokens``, ``kv_cache_dtype``: the names each finding's static cost is evaluated over
    (:mod:`castfind.analysis.cost`; a model config that cannot be read is a ValueError). The phases are in
    :mod:`castfind.pipeline`; the carried results are saved before ``post`` reads any trace, so a
    bad trace does not cost the next scan its warm start.
    ``outputs``: the report files the caller will write, (option, path, what, owns), refused before the scan
    (OutputPathError) as ``write_baseline`` is when one would replace an input, a scanned source or a foreign file.
    """
    request = pipeline.ScanRequest(
        paths=tuple(paths), roots=tuple(roots or ()), only=only, rules=tuple(rules or ()),
        entry_points=tuple(entry_points or ()), fail_on=fail_on, baseline=baseline, write_baseline=write_baseline,
        traces=tuple(traces or ()), demand=demand, explain=explain, stops=stops, exclude=tuple(exclude),
        warn_unused_ignores=warn_unused_ignores, baseline_commit=baseline_commit, include_tests=include_tests,
        index=pipeline.IndexOptions(**index_options),
        cost=pipeline.CostRequest(tuple(sets or ()), model_config, kv_tokens, kv_cache_dtype),
        outputs=tuple(outputs or ()),
    )
    return _scan(pipeline.plan(request))


def carried_scan(request: pipeline.ScanRequest) -> ScanRun | None:
    """What :func:`scan` returns for ``request`` when the whole outcome of its configuration on this
    tree is carried (the last run on the same tree left it); else None, having parsed nothing."""
    scan_plan = pipeline.plan(request)
    if scan_plan.carried is None:
        if scan_plan.index.cache is not None:
            scan_plan.index.cache.close()
        return None
    return _scan(scan_plan)


def _scan(scan_plan: pipeline.ScanPlan) -> ScanRun:
    explain, stops = scan_plan.explain, scan_plan.stops
    with survivors_frozen():  # PERF: full collections walk only what is new (castfind.core.heap)
        out = pipeline.run(scan_plan)
        pipeline.save_memo(scan_plan, out)
        at_ref = scan_plan.baseline_commit and not (explain or stops)  # those print no findings
        known = pipeline.findings_at_ref(scan_plan) if at_ref else None
        return pipeline.post(scan_plan, out, known)
