"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

import os
from typing import Any

from castfind import pipeline
from castfind.cache import Cache, default_cache_dir
from castfind.fsutil import OutputPathError, ensure_folder
from castfind.index import Index, ProgressFn
from castfind.pipeline import ScanRun
from castfind.types import Diagnostic
from castfind.where import WhereResult
from castfind.where import where as _where

__all__ = ["ScanRun", "open_index", "scan", "where"]


def open_index(
    roots: list[str],
    *,
    exclude: tuple[str, ...] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    jobs: int | None = None,
    follow_installed: bool = False,
    max_file_size: int | None = None,
    progress: ProgressFn | None = None,
) -> Index:
    """Discover the files under ``roots`` and open the facts cache. Parses nothing yet.

    Raises :class:`~castfind.fsutil.OutputPathError` when ``cache_dir`` cannot be used; when the
    default cache folder cannot, the index runs without a cache and says so in a diagnostic.
    """
    cache, notice = _open_cache(cache_dir) if use_cache else (None, None)
    index = Index.from_roots(
        roots or ["."],
        exclude=exclude,
        max_file_size=max_file_size,
        cache=cache,
        jobs=jobs if jobs else (os.cpu_count() or 1),
        follow_installed=follow_installed,
        progress=progress,
    )
    if notice is not None:
        index.diagnostics.append(notice)
    return index


def _open_cache(cache_dir: str | os.PathLike[str] | None) -> tuple[Cache | None, Diagnostic | None]:
    if cache_dir:
        return Cache(ensure_folder(cache_dir, "pass a writable folder to --cache-dir, or --no-cache")), None
    directory = default_cache_dir()
    try:
        ensure_folder(directory, "set XDG_CACHE_HOME to a writable folder, or pass --cache-dir DIR or --no-cache")
    except OutputPathError as exc:
        return None, Diagnostic(str(directory), 0, f"continuing without a cache: {exc.reason}", "cache")
    return Cache(directory), None


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None, **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites."""
    index_options.setdefault("follow_installed", True)
    index = open_index(roots, **index_options)
    return _where(index, symbol, at)


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
    exclude: tuple[str, ...] = (),
    **index_options: Any,
) -> ScanRun:
    """Scan roots for whole-buffer casts; never prints.

    ``paths`` are the roots, or with ``only=True`` the files to report on (pre-commit passes the
    staged files; the roots then come from ``roots``, ``[tool.castfind] roots`` or the current folder).
    ``index_options`` are :class:`~castfind.pipeline.IndexOptions`' fields. Raises RuleError,
    ConfigError, BaselineError, DiscoveryError, OutputPathError or TraceError for bad input; output
    paths and ``--only`` files are checked before anything is parsed. The phases are in
    :mod:`castfind.pipeline`; the carried results are saved before ``post`` reads any trace, so a
    bad trace does not cost the next scan its warm start.
    """
    request = pipeline.ScanRequest(
        paths=tuple(paths), roots=tuple(roots or ()), only=only, rules=tuple(rules or ()),
        entry_points=tuple(entry_points or ()), fail_on=fail_on, baseline=baseline, write_baseline=write_baseline,
        traces=tuple(traces or ()), demand=demand, explain=explain, exclude=tuple(exclude),
        index=pipeline.IndexOptions(**index_options),
    )
    scan_plan = pipeline.plan(request)
    out = pipeline.run(scan_plan)
    pipeline.save_memo(scan_plan)
    return pipeline.post(scan_plan, out)
