"""The phases of a scan: :func:`plan` → :func:`run` → :func:`post`, each callable on its own.

* **plan** settles everything that can be wrong with the request before a file is parsed:
  configuration, rules, roots, ``--only`` files and output paths; then it opens the index
  and the results carried from an earlier run (:class:`ScanPlan`).
* **run** is the engine, :func:`castfind.scan.scan`, unchanged; its outcome is frozen into
  a :class:`RunOutput` so nothing downstream can alter what the engine found.
* **post** turns raw findings into what is reported: runtime traces joined, inline
  suppressions applied, the baseline written or applied, and the findings ranked once
  (:class:`ScanRun`, holding the :class:`~castfind.report.ScanReport`).

:func:`castfind.api.scan` is these three plus :func:`save_memo`. Each phase takes the
previous one's record and nothing else, so a test (or another front end) can stop after any
of them, or hand one a record it built itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from castfind import findings as fnd
from castfind.cache import Cache, default_cache_dir
from castfind.config import Config, load_config, merge
from castfind.fsutil import OutputPathError, ensure_folder
from castfind.index import Index, ProgressFn
from castfind.report import ScanReport, SourceCache
from castfind.rules import MEASURED_CAST, Rule, RuleSet, load_rules
from castfind.types import Diagnostic, Finding

if TYPE_CHECKING:
    from castfind.checker import Explanation, StopTable
    from castfind.memo import Memo
    from castfind.scan import ScanOutcome

__all__ = [
    "IndexOptions", "RunOutput", "ScanPlan", "ScanRequest", "ScanRun",
    "open_index", "plan", "post", "report_rules", "run", "save_memo",
]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class IndexOptions:
    """How to open the index (:func:`castfind.api.open_index`'s keywords but ``exclude``,
    which comes from the merged configuration)."""

    cache_dir: str | os.PathLike[str] | None = None
    use_cache: bool = True
    jobs: int | None = None
    follow_installed: bool = False
    max_file_size: int | None = None
    progress: ProgressFn | None = None


@dataclass(frozen=True)
class ScanRequest:
    """A scan as asked for, before configuration files are read (:func:`castfind.api.scan`'s
    arguments). ``None`` and empty mean "not given": the configuration's value applies."""

    paths: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    only: bool = False
    rules: tuple[str, ...] = ()
    entry_points: tuple[str, ...] = ()
    fail_on: str | None = None
    baseline: str | None = None
    write_baseline: str | None = None
    traces: tuple[str, ...] = ()
    demand: bool = True
    explain: bool = False
    stops: bool = False
    exclude: tuple[str, ...] = ()
    index: IndexOptions = field(default_factory=IndexOptions)


@dataclass(frozen=True)
class ScanPlan:
    """Everything settled before parsing: the merged configuration, the roots actually scanned,
    the rule set, the opened index and the carried results (``memo``, under ``memo_key``).

    ``only`` holds the absolute paths to report on (``None``: every file).
    """

    config: Config
    roots: tuple[str, ...]
    ruleset: RuleSet
    index: Index
    only: frozenset[str] | None = None
    demand: bool = True
    explain: bool = False
    stops: bool = False
    traces: tuple[str, ...] = ()
    write_baseline: str | None = None
    memo: Memo | None = None
    memo_key: str | None = None


@dataclass(frozen=True)
class RunOutput:
    """What the engine found, before traces, suppressions and the baseline.

    ``modules`` maps each scanned file's root-relative path to its module name (the trace join
    matches by it); ``explanations`` holds ``--explain``'s record per cast ``(path, line, column)``;
    ``stops`` the ``--stops`` table (None when not asked).
    """

    findings: tuple[Finding, ...]
    diagnostics: tuple[Diagnostic, ...]
    stats: Mapping[str, Any]
    modules: Mapping[str, str]
    explanations: Mapping[tuple[str, int, int], Explanation]
    stops: StopTable | None = None

    @classmethod
    def of(cls, outcome: ScanOutcome) -> RunOutput:
        """Freeze :func:`castfind.scan.scan`'s outcome (copies, so the engine's lists stay its own)."""
        return cls(tuple(outcome.findings), tuple(outcome.diagnostics), dict(outcome.stats), dict(outcome.modules),
                   dict(outcome.explanations), outcome.stops)


@dataclass(frozen=True)
class ScanRun:
    """A finished scan: the report to render, the fail-on level, the rules it ran with (CF900
    included, for reporters that list rules), ``--explain``'s records per cast, the baseline file
    written, if one was, and the ``--stops`` table (None when not asked)."""

    report: ScanReport
    fail_on: str
    rules: tuple[Rule, ...]
    explanations: Mapping[tuple[str, int, int], Explanation]
    wrote_baseline: str | None = None
    stops: StopTable | None = None


# --------------------------------------------------------------------------- plan


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


def plan(request: ScanRequest) -> ScanPlan:
    """Check the request and open what the engine needs. Parses no source file.

    Output paths (``write_baseline``) and ``--only`` files are checked before the index is
    opened, so bad input fails in moments rather than after a long parse. Raises RuleError,
    ConfigError, BaselineError, DiscoveryError, OutputPathError or ValueError.
    """
    if request.write_baseline:
        fnd.check_baseline_target(request.write_baseline)
    cfg = merge(_load_config(request), roots=list(request.roots) or ([] if request.only else list(request.paths)),
                rules=list(request.rules), exclude=list(request.exclude), entry_points=list(request.entry_points),
                fail_on=request.fail_on, baseline=request.baseline)
    roots = tuple(str(r) for r in cfg.roots) or (".",)
    ruleset = load_rules([str(r) for r in cfg.rules])
    if cfg.entry_points:
        ruleset = ruleset.with_entry_points(tuple(cfg.entry_points))
    if request.only:
        _check_only_files(request.paths, roots)
    opts = request.index
    index = open_index(list(roots), exclude=tuple(cfg.exclude), cache_dir=opts.cache_dir, use_cache=opts.use_cache,
                       jobs=opts.jobs, follow_installed=opts.follow_installed, max_file_size=opts.max_file_size,
                       progress=opts.progress)
    memo, memo_key = None, None
    if index.cache is not None and request.demand and not request.explain:
        from castfind import memo as carried

        # Roots by name, not by absolute path: a moved or re-cloned checkout replays the same results.
        memo_key = carried.config_key(sorted(Path(r).resolve().name for r in roots), tuple(cfg.exclude), ruleset)
        memo = carried.Memo(index, carried.loads(index.cache.get_memo(memo_key)))
    return ScanPlan(
        config=cfg, roots=roots, ruleset=ruleset, index=index,
        only=frozenset(os.path.abspath(p) for p in request.paths) if request.only else None,
        demand=request.demand, explain=request.explain, stops=request.stops, traces=request.traces,
        write_baseline=request.write_baseline, memo=memo, memo_key=memo_key,
    )


def _load_config(request: ScanRequest) -> Config:
    """``[tool.castfind]`` from the first root's folder (a file's folder), else the current one."""
    if request.roots:
        folder = Path(request.roots[0])
    elif request.paths and not request.only:
        folder = Path(request.paths[0])
    else:
        folder = Path(".")
    if folder.is_file():
        folder = folder.parent
    return load_config(folder) if folder.is_dir() else load_config(Path("."))


def _check_only_files(paths: Sequence[str], roots: Sequence[str]) -> None:
    """``--only`` files must exist and lie inside a root, or nothing would be reported on them."""
    from castfind.discover import DiscoveryError

    bases = {b for r in roots for b in (os.path.abspath(r), os.path.realpath(r))}
    for p in paths:
        if not os.path.exists(p):
            raise DiscoveryError(p, "no such file; --only takes existing files inside a root")
        forms = {os.path.abspath(p), os.path.realpath(p)}
        if not any(f == b or f.startswith(b.rstrip(os.sep) + os.sep) for f in forms for b in bases):
            raise DiscoveryError(p, f"outside every root ({', '.join(roots)}) — pass --root FOLDER that holds it")


# --------------------------------------------------------------------------- run


def run(scan_plan: ScanPlan) -> RunOutput:
    """The engine over the plan's index and rules (parsing happens here)."""
    from castfind.scan import scan

    only = set(scan_plan.only) if scan_plan.only is not None else None
    return RunOutput.of(scan(scan_plan.index, scan_plan.ruleset, demand=scan_plan.demand, only=only,
                             explain=scan_plan.explain, stops=scan_plan.stops, memo=scan_plan.memo))


def save_memo(scan_plan: ScanPlan) -> None:
    """Store what :func:`run` added to the carried results, so the next scan of the same
    configuration replays it. Nothing is written when nothing changed or there is no cache."""
    memo, cache = scan_plan.memo, scan_plan.index.cache
    scan_plan.index.save_stats()
    if memo is not None and memo.dirty and cache is not None and scan_plan.memo_key is not None:
        from castfind import memo as carried

        cache.put_memo(scan_plan.memo_key, carried.dumps(memo.snapshot()))


# --------------------------------------------------------------------------- post


def post(scan_plan: ScanPlan, out: RunOutput) -> ScanRun:
    """Findings as reported: traces joined, suppressions and the baseline applied, ranked once.

    Reads the trace files and the flagged source files; writes the baseline file when the plan
    asks for one (then no baseline is applied: what was just recorded would hide everything).
    Raises TraceError or BaselineError.
    """
    found = _join_traces(list(out.findings), out.modules, scan_plan.traces, scan_plan.roots)
    sup = fnd.filter_suppressed(found, SourceCache().lines)
    kept = list(sup.kept)
    diags = [*out.diagnostics, *sup.diagnostics]
    cache = scan_plan.index.cache
    if cache is not None:
        diags += [Diagnostic(str(cache.path), 0, n, "cache") for n in cache.notices]
    wrote = None
    if scan_plan.write_baseline:
        fnd.write_baseline(scan_plan.write_baseline, kept)
        wrote = scan_plan.write_baseline
    fixed: tuple[fnd.BaselineEntry, ...] = ()
    hidden = 0
    if scan_plan.config.baseline is not None and not scan_plan.write_baseline:
        outcome = fnd.apply_baseline(kept, fnd.load_baseline(scan_plan.config.baseline))
        kept, hidden, fixed = list(outcome.kept), outcome.hidden, tuple(outcome.fixed)
    stats = dict(out.stats, suppressed=sup.suppressed, baseline_hidden=hidden, roots=list(scan_plan.roots))
    report = ScanReport(tuple(fnd.rank(kept)), tuple(diags), stats, fixed)
    return ScanRun(report, scan_plan.config.fail_on, report_rules(scan_plan.ruleset), out.explanations, wrote,
                   out.stops)


def _join_traces(found: list[Finding], modules: Mapping[str, str], traces: Sequence[str],
                 roots: Sequence[str]) -> list[Finding]:
    """``found`` with each trace's measurements attached, plus CF900 findings for the casts no
    rule flagged; ``found`` itself when there are no traces (the runtime side is not imported)."""
    if not traces:
        return found
    from castfind.runtime.join import join
    from castfind.runtime.trace import read_trace
    from castfind.types import TraceSite

    sites: list[TraceSite] = []
    for t in traces:
        _, s = read_trace(t)
        sites += s
    return join(found, sites, dict(modules), roots=list(roots))


def report_rules(ruleset: RuleSet) -> tuple[Rule, ...]:
    """The rules a report describes: the rule set's, and CF900 unless a rule file claims its id."""
    if any(r.id == MEASURED_CAST.id for r in ruleset.rules):
        return tuple(ruleset.rules)
    return (*ruleset.rules, MEASURED_CAST)
