"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from castfind.cache import Cache, default_cache_dir
from castfind.fsutil import OutputPathError, ensure_folder
from castfind.index import Index, ProgressFn
from castfind.types import Diagnostic
from castfind.where import WhereResult, where as _where

if TYPE_CHECKING:
    from castfind.report import ScanReport


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


def _check_only_files(paths: list[str], roots: list[str]) -> None:
    """``--only`` files must exist and lie inside a root, or nothing would be reported on them."""
    from castfind.discover import DiscoveryError

    bases = {b for r in roots for b in (os.path.abspath(r), os.path.realpath(r))}
    for p in paths:
        if not os.path.exists(p):
            raise DiscoveryError(p, "no such file; --only takes existing files inside a root")
        forms = {os.path.abspath(p), os.path.realpath(p)}
        if not any(f == b or f.startswith(b.rstrip(os.sep) + os.sep) for f in forms for b in bases):
            raise DiscoveryError(p, f"outside every root ({', '.join(roots)}) — pass --root FOLDER that holds it")


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None, **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites."""
    index_options.setdefault("follow_installed", True)
    index = open_index(roots, **index_options)
    return _where(index, symbol, at)


@dataclass(frozen=True)
class ScanRun:
    """A finished scan: the report to render, the fail-on level, the rules' metadata."""

    report: "ScanReport"
    fail_on: str
    rules_meta: dict[str, dict[str, str]]
    explanations: dict[tuple[str, int], list[str]]
    wrote_baseline: str | None = None


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
    **index_options,
) -> ScanRun:
    """Scan roots for whole-buffer casts; never prints.

    ``paths`` are the roots, or with ``only=True`` the files to report on (pre-commit passes the
    staged files; the roots then come from ``roots``, ``[tool.castfind] roots`` or the current folder).
    Raises RuleError, ConfigError, BaselineError, DiscoveryError, OutputPathError or TraceError for
    bad input; output paths and ``--only`` files are checked before anything is parsed.
    """
    from castfind import findings as fnd
    from castfind.config import load_config, merge
    from castfind.report import ScanReport, SourceCache
    from castfind.rules import load_rules
    from castfind.scan import scan as _scan

    if write_baseline:
        fnd.check_baseline_target(write_baseline)
    cfg_root = Path(roots[0]) if roots else (Path(paths[0]) if paths and not only else Path("."))
    if cfg_root.is_file():
        cfg_root = cfg_root.parent
    cfg = load_config(cfg_root) if cfg_root.is_dir() else load_config(Path("."))
    root_list = list(roots or []) or ([] if only else list(paths))
    cfg = merge(cfg, roots=root_list, rules=rules, exclude=list(exclude), entry_points=entry_points,
                fail_on=fail_on, baseline=baseline)
    effective_roots = [str(r) for r in cfg.roots] or ["."]
    ruleset = load_rules([str(r) for r in cfg.rules])
    if cfg.entry_points:
        ruleset = ruleset.with_entry_points(tuple(cfg.entry_points))
    if only:
        _check_only_files(paths, effective_roots)
    index = open_index(effective_roots, exclude=tuple(cfg.exclude), **index_options)
    only_set = {os.path.abspath(p) for p in paths} if only else None
    memo = None
    if index.cache is not None and demand and not explain:
        from castfind import memo as carried

        # Roots by name, not by absolute path: a moved or re-cloned checkout replays the same results.
        mkey = carried.config_key(sorted(Path(r).resolve().name for r in effective_roots), tuple(cfg.exclude), ruleset)
        memo = carried.Memo(index, carried.loads(index.cache.get_memo(mkey)))
    out = _scan(index, ruleset, demand=demand, only=only_set, explain=explain, memo=memo)
    if memo is not None and memo.dirty and index.cache is not None:
        index.cache.put_memo(mkey, carried.dumps(memo.snapshot()))
    found = out.findings
    if traces:
        from castfind.runtime.join import join
        from castfind.runtime.trace import read_trace

        sites = []
        for t in traces:
            _, s = read_trace(t)
            sites += s
        found = join(found, sites, out.modules, roots=effective_roots)
    source = SourceCache()
    sup = fnd.filter_suppressed(found, source.lines)
    kept = list(sup.kept)
    diags = list(out.diagnostics) + list(sup.diagnostics)
    if index.cache is not None:
        diags += [Diagnostic(str(index.cache.path), 0, n, "cache") for n in index.cache.notices]
    wrote = None
    if write_baseline:
        fnd.write_baseline(write_baseline, kept)
        wrote = write_baseline
    fixed: tuple = ()
    hidden = 0
    if cfg.baseline is not None and not write_baseline:
        outcome = fnd.apply_baseline(kept, fnd.load_baseline(cfg.baseline))
        kept, hidden, fixed = list(outcome.kept), outcome.hidden, tuple(outcome.fixed)
    stats = dict(out.stats, suppressed=len(sup.suppressed) if not isinstance(sup.suppressed, int) else sup.suppressed, baseline_hidden=hidden,
                 roots=effective_roots)
    meta = {r.id: {"name": r.name, "message": r.message, "fix": r.fix, "severity": r.severity}
            for r in ruleset.rules}
    meta.setdefault("CF900", {"name": "measured-cast-without-rule", "severity": "warning",
                              "message": "a cast measured at run time that no rule flagged",
                              "fix": "Check whether this cast must run on every step."})
    report = ScanReport(tuple(fnd.rank(kept)), tuple(diags), stats, fixed)
    return ScanRun(report, cfg.fail_on, meta, out.explanations, wrote)
