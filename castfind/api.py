"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from castfind import pipeline
from castfind.core.config import report_exclude_for
from castfind.core.heap import survivors_frozen
from castfind.core.types import Diagnostic
from castfind.pipeline import ScanRun, open_index
from castfind.where.lookup import DEFAULT_PARSE_BUDGET, WhereResult
from castfind.where.lookup import where as _where

__all__ = ["ScanRun", "Session", "open_index", "scan", "where"]


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None,
          report_exclude: tuple[str, ...] | None = None, budget: int | None = DEFAULT_PARSE_BUDGET,
          seconds: float | None = None, started: float | None = None, **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites.

    Call sites in files that ``report_exclude`` matches (default: the first root's
    ``[tool.castfind] report-exclude``) are marked as test call sites. ``budget``: bytes of uncached
    source the lookup may parse for aliases and call sites (None: no limit; the files left are
    named in an ``unresolved`` entry). ``seconds``: the lookup's time budget (None: the default or
    ``$CASTFIND_WHERE_TIME_BUDGET``; 0: none), counted from ``started`` (a :func:`time.monotonic` reading: when the
    command began, as :func:`castfind.core.started.command_started` gives it; default now). Raises ConfigError, and
    WhereError for a bad query or budget.
    """
    index_options.setdefault("follow_installed", True)
    if started is None:
        started = time.monotonic()  # the time budget covers opening the index too
    return _where_on(open_index(roots, **index_options), symbol, roots, at, report_exclude, budget, seconds, started)


def _where_on(index: pipeline.Index, symbol: str, roots: list[str], at: tuple[str, int] | None,
              report_exclude: tuple[str, ...] | None, budget: int | None, seconds: float | None,
              started: float) -> WhereResult:
    if report_exclude is None:
        report_exclude = report_exclude_for(roots)
    try:
        res = _where(index, symbol, at, report_exclude, budget, seconds, started)
    finally:
        index.save()
    return _with_cache_notices(res, index)


def _with_cache_notices(res: WhereResult, index: pipeline.Index) -> WhereResult:
    """``res`` with what the cache noticed (a damaged cache rebuilt, one that cannot be written: then no answer
    is stored and the next lookup computes again) as ``cache`` diagnostics, as a scan reports them."""
    if index.cache is None or not index.cache.notices:
        return res
    seen = {d.message for d in res.diagnostics}
    fresh = tuple(Diagnostic(str(index.cache.path), 0, n, "cache") for n in index.cache.notices if n not in seen)
    return replace(res, diagnostics=(*res.diagnostics, *fresh)) if fresh else res


def scan(request: pipeline.ScanRequest | Sequence[str], **options: Any) -> ScanRun:
    """Scan roots for whole-buffer casts, as ``request`` (:class:`~castfind.pipeline.ScanRequest`) asks; never prints.

    For convenience ``request`` may be the paths, with the request's fields as keywords
    (:meth:`ScanRequest.of <castfind.pipeline.ScanRequest.of>`: ``api.scan([root], jobs=1, use_cache=False)``).

    ``paths`` are the roots, or with ``only=True`` the files to report on (pre-commit passes the
    staged files; the roots then come from ``roots``, ``[tool.castfind] roots`` or the current folder).
    Raises RuleError, ConfigError, BaselineError, DiscoveryError, OutputPathError, GitRefError or TraceError for
    bad input (a model config that cannot be read is a ValueError); output paths, ``--only`` files and
    ``baseline_commit`` are checked before anything is parsed. What each field asks for is documented on
    :class:`~castfind.pipeline.ScanRequest` and the records it holds. The phases are in :mod:`castfind.pipeline`;
    the carried results are saved before ``post`` reads any trace, so a bad trace does not cost the next scan its
    warm start.
    """
    if not isinstance(request, pipeline.ScanRequest):
        request = pipeline.ScanRequest.of(request, **options)
    elif options:
        raise TypeError("api.scan: give a ScanRequest or paths and keywords, not both")
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


class Session:
    """Scans kept warm in one process (the language server): each :meth:`scan` starts from the last one's index
    and carried results (:class:`~castfind.pipeline.Warm`) when the configuration and roots are the same, so a
    scan after an edit reads, decodes and recomputes only what the edit changed. Its answers are
    :func:`scan`'s; what the scans carry is written to the cache by :meth:`persist`, which the caller runs when
    no answer waits on it (the language server: once no save came for a while, and at shutdown); a scan before
    it carries the last one's unwritten results on. Not thread-safe: one scan or persist at a time."""

    #: How long the index one :meth:`where` discovered answers the next lookups without discovering the roots
    #: again (a scan that finds a file changed, after a save in the editor, ends it at once): a file changed
    #: outside the editor is seen by a lookup at most this long after the lookup that last discovered them.
    WHERE_FRESH_S = 10.0

    def __init__(self) -> None:
        self._warm: pipeline.Warm | None = None
        self._unsaved: tuple[pipeline.ScanPlan, pipeline.RunOutput] | None = None
        self._where: tuple[Any, pipeline.Index, float] | None = None

    def where(self, symbol: str, roots: list[str], at: tuple[str, int] | None = None,
              report_exclude: tuple[str, ...] | None = None, budget: int | None = DEFAULT_PARSE_BUDGET,
              seconds: float | None = None, **index_options: Any) -> WhereResult:
        """:func:`where`, on the index the last lookup discovered when it is younger than :attr:`WHERE_FRESH_S`
        and no scan since found a changed file (PERF: discovering the roots is most of a warm lookup: 8,000 stats on both
        wheels); its answers are :func:`where`'s on the tree as it was then. It touches nothing :meth:`scan` and
        :meth:`persist` use but the cache (SQLite, safe across connections): it may run beside them."""
        index_options.setdefault("follow_installed", True)
        started = time.monotonic()
        key = (tuple(roots), sorted(index_options.items(), key=lambda kv: kv[0]))
        kept = self._where
        if kept is None or kept[0] != key or time.monotonic() - kept[2] > self.WHERE_FRESH_S:
            kept = self._where = (key, open_index(roots, **index_options), time.monotonic())
        return _where_on(kept[1], symbol, roots, at, report_exclude, budget, seconds, started)

    def scan(self, request: pipeline.ScanRequest) -> ScanRun:
        """:func:`scan` of ``request``, warm; raises what it raises (then the next scan starts cold)."""
        warm, self._warm = self._warm, None
        # PERF: the last run's carried results are not written first: this run starts from them in memory, and
        # its own (a superset) are written by the next persist.
        unsaved, self._unsaved = self._unsaved, None
        scan_plan = pipeline.plan(request, warm)
        if scan_plan.memo is None or scan_plan.memo.invalid:
            self._where = None  # the files changed since the lookup index was discovered (or nothing says not)
        if unsaved is not None and unsaved[0].memo is not None and unsaved[0].memo.dirty and scan_plan.memo is not None:
            scan_plan.memo.dirty = True  # what the last run added is still to be written
        del warm, unsaved  # PERF: the last index's bytes and facts are the new one's now; the rest can go
        with survivors_frozen():  # PERF: full collections walk only what is new (castfind.core.heap)
            out = pipeline.run(scan_plan)
            self._unsaved = (scan_plan, out)
            at_ref = scan_plan.baseline_commit and not (scan_plan.request.explain or scan_plan.request.stops)
            known = pipeline.findings_at_ref(scan_plan) if at_ref else None
            got = pipeline.post(scan_plan, out, known)
        self._warm = pipeline.Warm.of(scan_plan)
        return got

    @property
    def index(self) -> pipeline.Index | None:
        """The last scan's index (the next scan takes it over), or None when it left nothing warm."""
        return self._warm.index if self._warm is not None else None

    def persist(self) -> list[str]:
        """Write what the last scan carries (its stat and tree indexes, its steps; :func:`pipeline.save_memo`);
        returns what the cache noticed meanwhile (a write that failed: the next process starts colder)."""
        unsaved, self._unsaved = self._unsaved, None
        if unsaved is None:
            return []
        cache = unsaved[0].index.cache
        before = len(cache.notices) if cache is not None else 0
        pipeline.save_memo(*unsaved)
        return cache.notices[before:] if cache is not None else []


def _scan(scan_plan: pipeline.ScanPlan) -> ScanRun:
    explain, stops = scan_plan.request.explain, scan_plan.request.stops
    with survivors_frozen():  # PERF: full collections walk only what is new (castfind.core.heap)
        out = pipeline.run(scan_plan)
        pipeline.save_memo(scan_plan, out)
        at_ref = scan_plan.baseline_commit and not (explain or stops)  # those print no findings
        known = pipeline.findings_at_ref(scan_plan) if at_ref else None
        return pipeline.post(scan_plan, out, known)
