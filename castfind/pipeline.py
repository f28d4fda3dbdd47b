"""The phases of a scan: :func:`plan` → :func:`run` → :func:`post`, each callable on its own.

* **plan** settles everything that can be wrong with the request before a file is parsed:
  configuration, rules, roots, ``--only`` files and output paths; then it opens the index
  and the results carried from an earlier run (:class:`ScanPlan`).
* **run** is the engine, :func:`castfind.scan.scan`, unchanged; its outcome is frozen into
  a :class:`RunOutput` so nothing downstream can alter what the engine found.
* **post** turns raw findings into what is reported: runtime traces joined, inline
  suppressions applied, findings outside the report scope (tests, benchmarks: :mod:`castfind.core.scope`)
  set aside and counted, the baseline written or applied, and the findings ranked once
  (:class:`ScanRun`, holding the :class:`~castfind.report.ScanReport`).

:func:`castfind.api.scan` is these three plus :func:`save_memo`. Each phase takes the
previous one's record and nothing else, so a test (or another front end) can stop after any
of them, or hand one a record it built itself.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from castfind.analysis import findings as fnd
from castfind.analysis import modelpath
from castfind.analysis.cost import COST_VERSION, Bindings, CostModel, bindings, judged, parse_set, step_table, unreadable_set
from castfind.analysis.cost import check as check_cost
from castfind.analysis.resolve import Resolver
from castfind.core import sourcetext
from castfind.core.config import Config, discover_config, load_config_file, merge
from castfind.core.fsutil import OutputPathError, Owns, Protected, check_output_target, ensure_folder
from castfind.core.inputs import InputError, read_input
from castfind.core.rules import MEASURED_CAST, UNUSED_SUPPRESSION, Rule, RuleError, RuleSet, load_rules, rule_files
from castfind.core.scope import in_scope
from castfind.core.selection import Layer, Selection
from castfind.core.types import Diagnostic, Finding, TraceSite
from castfind.report import ScanReport, SourceCache
from castfind.store import gitref
from castfind.store import memo as carried
from castfind.store.cache import Cache, default_cache_dir
from castfind.store.discover import DiscoveryError, Package, check_root, package_roots
from castfind.store.gitref import RootAtRef
from castfind.store.index import Index, ProgressFn
from castfind.store.textquery import Predicates
from castfind.store.words import Words, carry_postings

if TYPE_CHECKING:
    from castfind.analysis.checker import Explanation, StopTable
    from castfind.analysis.scan import ScanOutcome
    from castfind.store.memo import Memo

__all__ = [
    "IndexOptions", "RunOutput", "ScanPlan", "ScanRequest", "ScanRun", "Warm",
    "findings_at_ref", "open_index", "plan", "post", "report_rules", "run", "save_memo",
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
class CostRequest:
    """The names a cost formula may be evaluated over (:mod:`castfind.analysis.cost`): ``--set NAME=VALUE``,
    ``--model-config`` (a Hugging Face ``config.json``), ``--kv-tokens``, ``--kv-cache-dtype``; and the rest of the
    deployment they describe: ``--platform``, ``--attention-backend``, ``--quantization``, ``--tp``, and whether
    findings off the deployment's path (``--all-paths``) or off the model's path (``--all-models``) are reported."""

    sets: tuple[tuple[str, str], ...] = ()
    model_config: str | None = None
    kv_tokens: int | None = None
    kv_cache_dtype: str | None = None
    platform: str | None = None
    attention_backend: str | None = None
    quantization: str | None = None
    tp: int | None = None
    all_paths: bool = False
    all_models: bool = False


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
    warn_unused_ignores: bool = True
    baseline_commit: str | None = None
    include_tests: bool = False
    #: Rule selection on the command line (``--select``, ``--extend-select``, ``--ignore``), laid over the
    #: configuration's (:mod:`castfind.core.selection`); ``select=None``: not given.
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    #: ``--config FILE``: this file's ``[tool.castfind]`` instead of the one discovered from the roots.
    config: str | None = None
    index: IndexOptions = field(default_factory=IndexOptions)
    cost: CostRequest = field(default_factory=CostRequest)
    #: The report files the caller will write: (option, path, what the document is, its ``owns`` check),
    #: checked in :func:`plan` as ``write_baseline`` is (:func:`castfind.core.fsutil.check_output_target`).
    outputs: tuple[tuple[str, str, str, Owns | None], ...] = ()

    @classmethod
    def of(cls, paths: Sequence[str] = (), **options: Any) -> ScanRequest:
        """The request for ``paths`` from flat keywords: this record's fields and those of
        :class:`IndexOptions` and :class:`CostRequest`, by name (lists become tuples); TypeError for
        any other keyword. What :func:`castfind.api.scan` takes besides a request."""
        groups: dict[str, Any] = {"index": IndexOptions, "cost": CostRequest}
        own = {f.name for f in fields(cls)} - {"paths", *groups}
        given: dict[str, dict[str, Any]] = {"": {}, **{g: {} for g in groups}}
        for key, value in options.items():
            group = next((g for g, record in groups.items() if key in {f.name for f in fields(record)}), "")
            if not group and key not in own:
                raise TypeError(f"unknown scan option {key!r}")
            given[group][key] = tuple(value) if isinstance(value, list) else value
        return cls(paths=tuple(paths), index=IndexOptions(**given["index"]), cost=CostRequest(**given["cost"]),
                   **given[""])


@dataclass(frozen=True)
class ScanPlan:
    """Everything settled before parsing: the merged configuration, the roots actually scanned,
    the rule set, the opened index and the carried results (``memo``, under ``memo_key``).

    ``request`` is the scan as asked for (what to explain, the traces, the baseline to write, ...);
    ``only`` holds the absolute paths to report on (``None``: every file). ``report_exclude``: the
    scope patterns whose findings post sets aside and whose calls the engine does not count as callers
    (empty with ``--include-tests``; part of ``memo_key``); ``packages``: the
    top-level packages discovered under the roots (what the CLI announces).
    """

    config: Config
    roots: tuple[str, ...]
    ruleset: RuleSet
    index: Index
    request: ScanRequest
    only: frozenset[str] | None = None
    memo: Memo | None = None
    memo_key: str | None = None
    #: The outcome of an earlier run of this configuration on this very tree (``run`` returns it).
    carried: RunOutput | None = None
    #: The carried results as loaded (before this run), for the scan at ``--baseline-commit`` (not decoded twice).
    memo_seed: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: ``--baseline-commit``: each root's repository and the commit REF names (checked in :func:`plan`).
    baseline_commit: tuple[RootAtRef, ...] = ()
    report_exclude: tuple[str, ...] = ()
    packages: tuple[Package, ...] = ()
    #: The names cost formulas are evaluated over (settled in :func:`plan`: a bad config file fails early).
    bindings: Bindings = field(default_factory=Bindings)
    #: Which rules are reported, where (settled in :func:`plan`: a selector naming no rule fails early).
    selection: Selection = field(default_factory=Selection)
    #: ``--model-config``'s fields (None: not given): what the model's path is read from (:mod:`castfind.analysis.modelpath`).
    model_config: Mapping[str, Any] | None = None


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
    written, if one was, the ``--stops`` table (None when not asked) and the top-level packages
    found under the roots."""

    report: ScanReport
    fail_on: str
    rules: tuple[Rule, ...]
    explanations: Mapping[tuple[str, int, int], Explanation]
    wrote_baseline: str | None = None
    stops: StopTable | None = None
    packages: tuple[Package, ...] = ()


@dataclass(frozen=True)
class Warm:
    """A finished run's index and carried results, kept in this process for the next run of the same
    configuration on the same roots (:class:`castfind.api.Session`, the language server): :func:`plan` takes
    over the bytes and facts of the files whose content is unchanged and the carried steps as they stand in
    memory, instead of reading, decoding and renaming them from the cache. What is computed is the same."""

    index: Index
    memo: Memo
    memo_key: str
    roots: tuple[str, ...]

    @classmethod
    def of(cls, scan_plan: ScanPlan) -> Warm | None:
        """What ``scan_plan``'s run leaves for the next (None when it carried nothing: no cache, ``--explain``)."""
        if scan_plan.memo is None or scan_plan.memo_key is None or scan_plan.index.raced:
            return None  # a file edited during the run: what was computed is of no one tree
        return cls(scan_plan.index, scan_plan.memo, scan_plan.memo_key, scan_plan.roots)


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

    Raises :class:`~castfind.core.fsutil.OutputPathError` when ``cache_dir`` cannot be used; when the
    default cache folder cannot, the index runs without a cache and says so in a diagnostic.
    """
    for root in roots or ["."]:
        check_root(root)  # before the cache is asked for its tree
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


def plan(request: ScanRequest, warm: Warm | None = None) -> ScanPlan:
    """Check the request and open what the engine needs. Parses no source file. ``warm``: the last run of this
    process (:class:`Warm`), used when it ran the same configuration on the same roots.

    Output paths (``write_baseline``) and ``--only`` files are checked before the index is
    opened, so bad input fails in moments rather than after a long parse. Raises RuleError,
    ConfigError, BaselineError, DiscoveryError, OutputPathError or ValueError.
    """
    cfg = merge(_load_config(request), roots=list(request.roots) or ([] if request.only else list(request.paths)),
                rules=list(request.rules), exclude=list(request.exclude), entry_points=list(request.entry_points),
                fail_on=request.fail_on, baseline=request.baseline)
    roots = tuple(str(r) for r in cfg.roots) or (".",)
    _check_outputs(request, cfg, roots)
    ruleset = load_rules([str(r) for r in cfg.rules])
    if cfg.entry_points:
        ruleset = ruleset.with_entry_points(tuple(cfg.entry_points))
    model_config = _model_config(request.cost)
    bound = _bindings(ruleset, request.cost, model_config)
    ruleset.deployment.check_platform(request.cost.platform)
    selection = _selection(request, cfg)
    selection.check(report_rules(ruleset, unused_ignores=True))
    if request.only:
        _check_only_files(request.paths, roots)
    at_ref = gitref.resolve(roots, request.baseline_commit) if request.baseline_commit is not None else ()
    opts = request.index
    index = open_index(list(roots), exclude=tuple(cfg.exclude), cache_dir=opts.cache_dir, use_cache=opts.use_cache,
                       jobs=opts.jobs, follow_installed=opts.follow_installed, max_file_size=opts.max_file_size,
                       progress=opts.progress)
    report_exclude = () if request.include_tests else tuple(cfg.report_exclude)
    memo, memo_key, memo_seed, carried_out = None, None, None, None
    if index.cache is not None and request.demand and not request.explain:

        # Roots by name, not by absolute path: a moved or re-cloned checkout replays the same results.
        # The report scope is part of the key: callers outside it do not count (castfind.analysis.callgraph).
        memo_key = carried.config_key(sorted(Path(r).resolve().name for r in roots), tuple(cfg.exclude), ruleset,
                                      report_exclude)
        if warm is not None and (warm.memo_key != memo_key or warm.roots != roots):
            warm = None
        if warm is not None:
            index.adopt(warm.index)
            carry_postings(index, warm.index)
        if _whole_outcome(request, opts):
            carried_out = _carried_outcome(index, _outcome_key(memo_key))
        if carried_out is None and warm is not None:
            memo = carried.Memo(index, Predicates(ruleset), after=warm.memo)
        elif carried_out is None:
            memo_seed = carried.loads(index.cache.get_memo(memo_key))
            memo = carried.Memo(index, Predicates(ruleset), memo_seed)
    return ScanPlan(
        config=cfg, roots=roots, ruleset=ruleset, index=index, request=request,
        only=frozenset(os.path.abspath(p) for p in request.paths) if request.only else None,
        memo=memo, memo_key=memo_key, memo_seed=memo_seed, carried=carried_out, baseline_commit=at_ref,
        report_exclude=report_exclude,
        packages=package_roots(index.files, tuple(cfg.report_exclude)), bindings=bound, selection=selection,
        model_config=model_config,
    )


def _selection(request: ScanRequest, cfg: Config) -> Selection:
    """The configuration's selectors, then the command line's over them."""
    where = f"{cfg.source} [tool.castfind]" if cfg.source is not None else "[tool.castfind]"
    layers = [Layer(cfg.select, cfg.extend_select, cfg.ignore, where)]
    layers.append(Layer(request.select, request.extend_select, request.ignore))
    return Selection(tuple(layers), cfg.per_file_ignores, where)


def _select(scan_plan: ScanPlan, found: list[Finding]) -> tuple[list[Finding], int]:
    """The findings the rule selection reports, and how many it left out (:mod:`castfind.core.selection`)."""
    selection = scan_plan.selection
    if selection.trivial:
        return found, 0
    rules = report_rules(scan_plan.ruleset, unused_ignores=True)
    known = {r.id for r in rules}
    enabled = selection.enabled(rules) | {f.rule for f in found if f.rule not in known}
    kept = [f for f in found if selection.keeps(enabled, f.rule, f.name, f.root, f.path)]
    return kept, len(found) - len(kept)


def _check_outputs(request: ScanRequest, cfg: Config, roots: tuple[str, ...]) -> None:
    """Every output (``write_baseline`` and ``request.outputs``) through one check, before anything is parsed:
    writable, not an input of this run, not a ``.py`` file under a root, not in the cache folder, and not an
    existing file of another kind (:func:`castfind.core.fsutil.check_output_target`)."""
    if not request.write_baseline and not request.outputs:
        return
    try:
        rule_inputs: list[Path] = rule_files(list(cfg.rules))
    except RuleError:  # a missing rule file: load_rules says so next
        rule_inputs = []
    inputs = [*rule_inputs, cfg.baseline, cfg.source, *request.traces, request.cost.model_config,
              *(request.paths if request.only else ())]
    folders = [request.index.cache_dir or default_cache_dir()]
    protected = Protected.of(inputs, [*roots, *(request.paths if not request.only else ())], folders)
    if request.write_baseline:
        fnd.check_baseline_target(request.write_baseline, protected)
    for option, path, what, owns in request.outputs:
        check_output_target(path, option, what, owns, protected)


def _model_config(req: CostRequest) -> dict[str, Any] | None:
    """``--model-config``'s fields (None: not given); a file that cannot be read is a ValueError (one line)."""
    if req.model_config is None:
        return None
    import json

    try:
        doc = json.loads(read_input(req.model_config, "model-config"))
    except InputError as e:
        raise ValueError(f"{req.model_config}: --model-config: {e}") from None
    except OSError as e:
        raise ValueError(f"{req.model_config}: --model-config: cannot read: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        why = " ".join(str(e).split())
        raise ValueError(f"{req.model_config}: --model-config: not JSON: {why}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{req.model_config}: --model-config: expected a JSON object (a Hugging Face "
                         f"config.json), got {type(doc).__name__}")
    return doc


def _bindings(ruleset: RuleSet, req: CostRequest, config: dict[str, Any] | None = None) -> Bindings:
    """The names bound for cost formulas from the model config's fields, the flags and ``--set``."""
    sets = [parse_set(f"{name}={value}") for name, value in req.sets]  # API callers pass pairs: same check
    # The code's tensor-parallel names are bound (to 1 unless --tp says) once a deployment is described at all;
    # without one they stay unbound, so a scan without deployment flags costs exactly as before.
    # Likewise the KV cache's dtype: the engine's default spelling (`auto`: the model's dtype) unless given.
    described = deployment_given(req)
    tp = req.tp if req.tp is not None else 1 if described else None
    kv_dtype = req.kv_cache_dtype
    if kv_dtype is None and described and "auto" in dict(ruleset.cost.kv_cache_dtypes):
        kv_dtype = "auto"
    return bindings(ruleset.cost, config=config, kv_tokens=req.kv_tokens, kv_cache_dtype=kv_dtype, tp=tp, sets=sets)


def deployment_given(req: CostRequest) -> bool:
    """Does the request describe a deployment (any of ``--model-config``, ``--platform``, ``--attention-backend``,
    ``--kv-cache-dtype``, ``--kv-tokens``, ``--quantization``, ``--tp``, ``--set``)? Then a scan ends with the
    per-step table (:func:`castfind.analysis.cost.step_table`)."""
    return bool(req.sets) or any(v is not None for v in (req.model_config, req.kv_tokens, req.kv_cache_dtype,
                                                         req.platform, req.attention_backend, req.quantization, req.tp))


def _whole_outcome(request: ScanRequest, opts: IndexOptions) -> bool:
    """Is this a run whose whole outcome is carried? Not with ``--only`` (it reports on some files),
    ``--stops`` (checked fresh), or installed packages (files outside the roots may join)."""
    return not (request.only or request.stops or opts.follow_installed)


def _outcome_key(memo_key: str, slot: str = "") -> str:
    """Where a configuration's whole outcome is stored: one slot for the scanned tree, one for the
    tree at ``--baseline-commit`` (``slot="ref"``), so a warm run carries both."""
    return memo_key + "-outcome" + (f"-{slot}" if slot else "")


def _carried_outcome(index: Index, key: str) -> RunOutput | None:
    """The outcome stored by the last run of this configuration, if it ran on the same tree.

    PERF: a warm scan of an unchanged tree then costs hashing the files and reading one row,
    not replaying (and decoding) every carried step.
    """

    doc = carried.load_for_tree(index, key)
    if doc is None:
        return None
    found, diags, stats, modules = doc.get("findings"), doc.get("diagnostics"), doc.get("stats"), doc.get("modules")
    if not (isinstance(found, list) and all(isinstance(f, Finding) for f in found)
            and isinstance(diags, list) and all(isinstance(d, Diagnostic) for d in diags)
            and isinstance(stats, dict) and isinstance(modules, dict)):
        return None  # a damaged or foreign row: compute
    roots = {n: r for r, n in carried.root_ids(index).items()}
    seen = {(d.path, d.line, d.message) for d in index.diagnostics}
    return RunOutput(
        tuple(replace(f, root=roots.get(f.root, f.root)) for f in found),
        (*index.diagnostics, *(d for d in diags if (d.path, d.line, d.message) not in seen)),
        {**stats, "parsed": 0, "loaded": 0, "replayed": 0, "outcome": "carried"}, dict(modules), {})


def _load_config(request: ScanRequest) -> Config:
    """``--config FILE`` when given; else ``[tool.castfind]`` discovered from the first root's folder (a file's
    folder), else from the current one, up to the repository top (:func:`castfind.core.config.config_folder`)."""
    if request.config is not None:
        return load_config_file(request.config)
    if request.roots:
        folder = Path(request.roots[0])
    elif request.paths and not request.only:
        folder = Path(request.paths[0])
    else:
        folder = Path(".")
    if folder.is_file():
        folder = folder.parent
    return discover_config(folder if folder.is_dir() else Path("."))


def _check_only_files(paths: Sequence[str], roots: Sequence[str]) -> None:
    """``--only`` files must exist and lie inside a root, or nothing would be reported on them."""

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
    if scan_plan.carried is not None:
        return scan_plan.carried
    from castfind.analysis.scan import scan  # PERF: the engine (and networkx) only when the outcome is not carried

    only = set(scan_plan.only) if scan_plan.only is not None else None
    out = RunOutput.of(scan(scan_plan.index, scan_plan.ruleset, demand=scan_plan.request.demand, only=only,
                            explain=scan_plan.request.explain, stops=scan_plan.request.stops, memo=scan_plan.memo,
                            report_exclude=scan_plan.report_exclude))
    return replace(out, stats={**out.stats, "outcome": "computed"})


def save_memo(scan_plan: ScanPlan, out: RunOutput | None = None) -> None:
    """Store what :func:`run` added to the carried results, so the next scan of the same
    configuration replays it. Nothing is written when nothing changed or there is no cache.

    With ``out`` (what :func:`run` returned), the whole outcome is stored too, under the digest of
    the tree it was computed on, for the next run on the same tree.
    """
    scan_plan.index.save()  # the stat index and tree index: the next run hashes only files whose stat changed
    memo, cache, key = scan_plan.memo, scan_plan.index.cache, scan_plan.memo_key
    if memo is None or cache is None or key is None:
        return

    if memo.dirty and not scan_plan.index.raced:  # a file edited during the run: nothing carried
        cache.put_memo(key, carried.dumps(memo.snapshot()))
    if out is not None and not (scan_plan.only is not None or scan_plan.request.stops or scan_plan.index.follow_installed):
        _store_outcome(scan_plan, out, _outcome_key(key))


def _store_outcome(scan_plan: ScanPlan, out: RunOutput, key: str) -> None:
    """The whole outcome under ``key``, with the digest of the tree it was computed on."""

    ids = carried.root_ids(scan_plan.index)
    carried.store_for_tree(scan_plan.index, key, {
        "findings": [replace(f, root=ids.get(f.root, f.root)) for f in out.findings],
        "diagnostics": list(out.diagnostics), "stats": {k: v for k, v in out.stats.items() if k != "seconds"},
        "modules": dict(out.modules)})


# --------------------------------------------------------------------------- post


def post(scan_plan: ScanPlan, out: RunOutput, known: Sequence[Finding] | None = None) -> ScanRun:
    """Findings as reported: traces joined, suppressions applied (and those that silenced nothing
    reported, CF001), the baseline applied, the findings ``known`` at the baseline commit taken
    away (:func:`findings_at_ref`), findings outside the report scope set aside (counted in
    ``stats["out_of_scope"]``), ranked once.

    Reads the trace files and the source files; writes the baseline file when the plan
    asks for one (then no baseline is applied: what was just recorded would hide everything).
    Raises TraceError or BaselineError.
    """
    found = _join_traces(list(out.findings), out.modules, scan_plan.request.traces, scan_plan.roots)
    sup = fnd.filter_suppressed(found, SourceCache().lines)
    kept = list(sup.kept)
    if scan_plan.request.warn_unused_ignores:
        kept += _unused_suppressions(scan_plan, sup.used)
    kept, deselected = _select(scan_plan, kept)
    kept, out_of_scope = _split_scope(kept, scan_plan.report_exclude)
    dep, graph = _deployment(scan_plan), _graph_once(scan_plan)
    kept, off_model, model_diags, model_path = _model_path(scan_plan, kept, dep)
    kept, off_path = _on_deployment(scan_plan, kept, graph, dep)
    kept, cost_diags = _costs(scan_plan, kept, model_path)
    kept = [_checked(f, scan_plan.bindings) for f in kept]
    diags = [*out.diagnostics, *sup.diagnostics, *model_diags, *cost_diags]
    cache = scan_plan.index.cache
    if cache is not None:
        diags += [Diagnostic(str(cache.path), 0, n, "cache") for n in cache.notices]
    wrote = None
    if scan_plan.request.write_baseline:
        fnd.write_baseline(scan_plan.request.write_baseline, kept)
        wrote = scan_plan.request.write_baseline
    fixed: tuple[fnd.BaselineEntry, ...] = ()
    hidden = 0
    if scan_plan.config.baseline is not None and not scan_plan.request.write_baseline:
        outcome = fnd.apply_baseline(kept, fnd.load_baseline(scan_plan.config.baseline))
        kept, hidden, fixed = list(outcome.kept), outcome.hidden, tuple(outcome.fixed)
    stats = dict(out.stats, suppressed=sup.suppressed, baseline_hidden=hidden, out_of_scope=out_of_scope,
                 deselected=deselected,
                 roots=list(scan_plan.roots), packages=[p.to_dict() for p in scan_plan.packages])
    if known is not None:
        outcome = fnd.apply_baseline(kept, fnd.Baseline(fnd.baseline_entries(known)))
        kept = list(outcome.kept)
        stats["baseline_commit"] = {"ref": scan_plan.request.baseline_commit,
                                    "commits": sorted({at.commit for at in scan_plan.baseline_commit}),
                                    "hidden": outcome.hidden, "fixed": sum(e.count for e in outcome.fixed)}
    ranked = tuple(fnd.rank(kept))
    step = step_table(ranked, truth=(lambda test: dep.evaluate(test)[0]) if dep.active else None) \
        if deployment_given(scan_plan.request.cost) else None
    report = ScanReport(ranked, tuple(diags), stats, fixed,
                        off_path={**({"model": off_model} if off_model else {}), **off_path}, step=step)
    return ScanRun(report, scan_plan.config.fail_on, report_rules(scan_plan.ruleset, scan_plan.request.warn_unused_ignores),
                   out.explanations, wrote, out.stops, scan_plan.packages)


def _on_deployment(scan_plan: ScanPlan, found: list[Finding], graph: Callable[[], Any], dep: Any
                   ) -> tuple[list[Finding], dict[str, int]]:
    """:func:`_deployment_path` then :func:`_steps`, carried in the cache between runs (:class:`_DeploymentRow`,
    keyed by the deployment's bindings and rule data, ``--all-paths`` and the findings they are given). PERF: a
    finding under a false test is searched again with the deployment's false edges closed, over a call graph
    built for it (seconds on SGLang, at every run: those searches come after the engine's carried results are
    stored); a warm run of the same deployment over unchanged files reads the outcome back and builds no graph.
    A miss carries the producers' answers too (:func:`_store_answers`)."""
    if not dep.active and not deployment_given(scan_plan.request.cost):
        return found, {}
    ids = carried.root_ids(scan_plan.index)
    rows = [replace(f, root=ids.get(f.root, f.root)) for f in found]
    row = _DeploymentRow(scan_plan, "deployment", dep.key, repr(scan_plan.ruleset.deployment),
                         repr(scan_plan.ruleset.steps), scan_plan.request.cost.all_paths, repr(rows))
    doc = row.load()
    if (isinstance(doc, dict) and isinstance(got := doc.get("found"), list) and all(isinstance(f, Finding) for f in got)
            and isinstance(off := doc.get("off"), dict)
            and all(isinstance(k, str) and isinstance(v, int) for k, v in off.items())):
        roots = {n: r for r, n in ids.items()}
        return [replace(f, root=roots.get(f.root, f.root)) for f in got], dict(off)
    kept, off_path = _deployment_path(scan_plan, found, graph, dep)
    kept = _steps(scan_plan, kept, graph, dep)
    _store_answers(scan_plan, dep)
    row.store({"found": [replace(f, root=ids.get(f.root, f.root)) for f in kept], "off": off_path})
    return kept, off_path


def _deployment_path(scan_plan: ScanPlan, found: list[Finding], graph: Callable[[], Any], dep: Any
                     ) -> tuple[list[Finding], dict[str, int]]:
    """The findings with their ``off_path`` set under ``--platform`` and the server flags
    (:mod:`castfind.analysis.deployment`), those off the path left out unless ``--all-paths``, and how many
    were left out (``{"branch": N}``; empty when no flag binds)."""
    from castfind.analysis import deployment

    req = scan_plan.request.cost
    if not dep.active:
        return found, {}
    marked = deployment.prune(found, dep, graph, deployment.facts_reader(scan_plan.index))
    if req.all_paths:
        return marked, {}
    kept = [f for f in marked if not f.off_path.startswith("branch: ")]
    return kept, ({"branch": len(marked) - len(kept)} if len(kept) < len(marked) else {})


def _deployment(scan_plan: ScanPlan) -> Any:
    """The plan's platform and server flags, bound (:class:`castfind.analysis.deployment.Deployment`), with where
    the index's enum members are produced (asked only when a test compares with one)."""
    from castfind.analysis import deployment
    from castfind.analysis.producers import Producers

    req = scan_plan.request.cost
    dep = deployment.deployment_of(scan_plan.ruleset.deployment, req.platform, scan_plan.model_config,
                                   attention_backend=req.attention_backend,
                                   kv_cache_dtype=req.kv_cache_dtype, quantization=req.quantization, tp=req.tp)
    if not dep.active:  # nothing binds: no test is evaluated, so no producer is asked (no row read on a plain scan)
        return dep
    return replace(dep, producers=Producers(scan_plan.index, _carried_answers(_producers_row(scan_plan, dep).load())))


def _producers_row(scan_plan: ScanPlan, dep: Any) -> _DeploymentRow:
    """Where the producers' answers of this deployment are carried (:class:`_DeploymentRow`): they depend on the
    bindings (``dep.key``), the deployment's rule data and the files. PERF: a warm run reads them back before
    pruning, and neither builds the identifier index nor decodes facts for them."""
    return _DeploymentRow(scan_plan, "producers", repr(scan_plan.ruleset.deployment), dep.key)


def _carried_answers(payload: Any) -> list[tuple[str, str, tuple[str, ...] | None]]:
    """The producers' answers a row holds, as :class:`~castfind.analysis.producers.Producers` takes them; none
    (all computed again) when the row is absent or damaged."""
    if not isinstance(payload, list):
        return []
    out: list[tuple[str, str, tuple[str, ...] | None]] = []
    for item in payload:
        if not (isinstance(item, (list, tuple)) and len(item) == 3 and isinstance(item[0], str)
                and isinstance(item[1], str)
                and (item[2] is None or (isinstance(item[2], (list, tuple)) and all(isinstance(u, str) for u in item[2])))):
            return []
        out.append((item[0], item[1], None if item[2] is None else tuple(item[2])))
    return out


def _store_answers(scan_plan: ScanPlan, dep: Any) -> None:
    """After the deployment's steps: the producers' answers, when this run computed new ones."""
    if dep.producers is not None and dep.producers.computed:
        _producers_row(scan_plan, dep).store([list(a) for a in dep.producers.answers()])


def _steps(scan_plan: ScanPlan, found: list[Finding], graph: Callable[[], Any], dep: Any) -> list[Finding]:
    """On a deployment scan, each finding on the path with the steps of the serving loop it runs on
    (:func:`castfind.analysis.deployment.steps`); without deployment flags the findings as they are."""
    from castfind.analysis import deployment

    if not deployment_given(scan_plan.request.cost):
        return found
    return deployment.steps(found, scan_plan.ruleset, dep, graph)


def _graph_once(scan_plan: ScanPlan) -> Callable[[], Any]:
    """:func:`_call_graph`, built on the first call and shared by the deployment's steps after the engine."""
    built: list[Any] = []

    def get() -> Any:
        if not built:
            built.append(_call_graph(scan_plan))
        return built[0]

    return get


def _call_graph(scan_plan: ScanPlan) -> Any:
    """The engine's call graph over the plan's index, its carried steps replayed (the callers found by the scan)."""
    from castfind.analysis.callgraph import CallGraph
    from castfind.analysis.resolve import Resolver
    from castfind.store.textquery import TextQueries

    index, memo = scan_plan.index, scan_plan.memo
    if memo is None:
        seed = None
        if index.cache is not None and scan_plan.memo_key is not None:
            seed = carried.loads(index.cache.get_memo(scan_plan.memo_key))
        memo = carried.Memo(index, Predicates(scan_plan.ruleset), seed)
    return CallGraph(index, Resolver(index), scan_plan.ruleset, TextQueries(index, memo), scan_plan.report_exclude)


class _DeploymentRow:
    """One answer of a deployment scan carried in the cache between runs (the model path, the producers' answers).

    PERF: such an answer reads the facts of many files (seconds on SGLang) and depends on nothing but the request,
    the rule data and the files; so it is stored under a key of ``kind``, the carried results' key (castfind's
    sources, the rules, the roots) and ``parts`` (the config and flags, the deployment's bindings, ...), with the
    digest of the tree it was computed on (:func:`carried.store_for_tree`): a warm run of the same deployment over
    unchanged files reads it back; an edited file, a damaged row or another deployment computes it again. Without
    a cache (or carried results) nothing is read or stored.
    """

    def __init__(self, scan_plan: ScanPlan, kind: str, *parts: Any) -> None:
        import hashlib
        import json

        self.index, self.key = scan_plan.index, None
        if self.index.cache is not None and scan_plan.memo_key is not None:
            blob = json.dumps([scan_plan.memo_key, *parts], sort_keys=True, default=str)
            self.key = f"{kind}-{hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()}"

    def load(self) -> Any:
        """The payload stored for this very tree, or None (absent, damaged, another tree, no cache)."""
        doc = carried.load_for_tree(self.index, self.key) if self.key is not None else None
        return doc.get("payload") if doc is not None else None

    def store(self, payload: Any) -> None:
        if self.key is not None:
            carried.store_for_tree(self.index, self.key, {"payload": payload})


def _select_model_path(scan_plan: ScanPlan, config: Mapping[str, Any], flags: Mapping[str, str | None], dep: Any
                       ) -> tuple[modelpath.ModelPath | None, list[Diagnostic]]:
    """:func:`modelpath.select`, carried in the cache between runs (:class:`_DeploymentRow`: selecting reads the
    facts of every file that registers a model, hundreds in SGLang), keyed by the config and flags, the models'
    rule data and the deployment's bindings (they decide a factory's platform tests)."""
    row = _DeploymentRow(scan_plan, "modelpath", config, flags, repr(scan_plan.ruleset.models), dep.key)
    doc = row.load()
    if doc is not None:
        try:
            path = modelpath.ModelPath.from_dict(doc["path"]) if doc["path"] is not None else None
            return path, [Diagnostic(str(d["path"]), int(d["line"]), str(d["message"]), d["kind"])
                          for d in doc["diagnostics"]]
        except (ValueError, KeyError, TypeError, AttributeError):  # a damaged row: compute it again
            pass
    index = scan_plan.index
    path, diags = modelpath.select(index, Resolver(index), scan_plan.ruleset.models, config,
                                   scan_plan.request.cost.model_config or "", flags, dep if dep.active else None)
    row.store({"path": path.to_dict() if path is not None else None, "diagnostics": [d.to_dict() for d in diags]})
    return path, diags


def _model_path(scan_plan: ScanPlan, found: list[Finding], dep: Any
                ) -> tuple[list[Finding], int, list[Diagnostic], modelpath.ModelPath | None]:
    """With ``--model-config``: each finding off the model's path (:mod:`castfind.analysis.modelpath`) marked with
    why, and left out unless ``--all-models`` (how many were left out is returned), and the path itself (the cost
    stage leaves out the callers that are another model's)."""
    config, req = scan_plan.model_config, scan_plan.request.cost
    if config is None or not found:
        return found, 0, [], None
    flags = {"attention_backend": req.attention_backend, "quantization": req.quantization}
    path, diags = _select_model_path(scan_plan, config, flags, dep)
    if path is None:
        return found, 0, diags, None
    marked = [replace(f, off_path=why) if (why := modelpath.off_path(path, f)) else f for f in found]
    if req.all_models:
        return marked, 0, diags, path
    kept = [f for f in marked if not f.off_path]
    return kept, len(marked) - len(kept), diags, path


class _IndexLookup:
    """:class:`castfind.analysis.cost.Lookup` over the index: definitions by name (files found by identifier,
    their facts from the cache), each name looked up once."""

    def __init__(self, index: Index) -> None:

        self.index = index
        self.words = Words(index)

    def definitions(self, name: str) -> list[tuple[Any, Any]]:
        # PERF: only files whose text defines the name are decoded (`Module`, a base of thousands of
        # classes, is a word of most files and defined in none of them).
        pattern = re.compile(rb"\b(?:class|def)\s+" + re.escape(name.encode()) + rb"\b")
        files = [sf for sf in self.words.containing([name]) if pattern.search(self.index.data(sf))]
        out: list[tuple[Any, Any]] = []
        for facts in self.index.load_files(files):
            out += [(facts, d) for d in facts.definitions if d.name == name]
        return out

    def facts(self, root: str, path: str) -> Any:
        sf = self.index.file_for_path(os.path.join(root, path)) if root else self.index.file_for_path(path)
        return self.index.facts_of(sf) if sf is not None else None

    def files_naming(self, name: str, limit: int) -> list[Any]:
        return list(self.index.load_files(self.words.containing([name])[:limit]))


def _checked(f: Finding, bound: Bindings) -> Finding:
    """``f`` with its static cost held against its measurement, when a trace measured it (:func:`cost.check`)."""
    if f.cost is None or f.runtime is None:
        return f
    return replace(f, cost=replace(f.cost, check=check_cost(f.cost, f.runtime, bound)))


def _costs(scan_plan: ScanPlan, found: list[Finding], path: modelpath.ModelPath | None = None
           ) -> tuple[list[Finding], list[Diagnostic]]:
    """Each finding's static cost (:mod:`castfind.analysis.cost`), and a diagnostic per ``--set`` name no formula used.

    PERF: only findings are costed (after suppression and scope), each class and attribute once per run.
    """

    roots = carried.root_ids(scan_plan.index)

    def cost_id(f: Finding) -> tuple[str, str, int, int, str]:
        # Root-relative (the root's number, not its absolute path): a moved checkout carries its costs,
        # and two roots with the same folder name stay apart.
        return (roots.get(f.root, f.root), f.path, f.line, f.column, f.rule)

    wanted = [f for f in found if f.root and f.rule != MEASURED_CAST.id]
    got = _carried_costs(scan_plan, [cost_id(f) for f in wanted], path)
    if got is None:
        model = CostModel(scan_plan.ruleset, _IndexLookup(scan_plan.index), scan_plan.bindings,
                          deployment=deployment_given(scan_plan.request.cost),
                          off_model=path.verdict if path is not None else None)
        got = ({cost_id(f): model.cost(f) for f in wanted}, model.unused_sets())
        _store_costs(scan_plan, got, path)
    table, unused = got
    out = [judged(f, table.get(cost_id(f))) for f in found]
    bound = scan_plan.bindings
    diags = [Diagnostic("--set", 0, f"{n}: no cost formula of this scan reads {n}; check the name against the "
                                   f"formulas the findings' cost lines show", "config")
             for n in unused if n in bound.explicit]
    diags += [Diagnostic("--set", 0, why, "config") for n in bound.explicit
              if n not in unused and (why := unreadable_set(bound, n)) is not None]
    if bound.kv_tokens and all(n in unused for n in bound.kv_tokens):
        names = ", ".join(bound.kv_tokens)
        diags.append(Diagnostic("--kv-tokens", 0, f"binds {names}, which no cost formula of this scan reads (no "
                                f"reported finding's buffer is sized by it), so it changes no cost — bind the name "
                                f"the buffers are sized by with --set NAME=N (their cost lines list it as unbound)",
                                "config"))
    return out, diags


def _cost_key(scan_plan: ScanPlan, path: modelpath.ModelPath | None = None) -> str | None:
    """Where this configuration's costs are stored, with the bound names (None: no cache, no carried results)."""
    if scan_plan.index.cache is None or scan_plan.memo_key is None:
        return None
    import hashlib

    bound = scan_plan.bindings
    req = scan_plan.request.cost
    # A parameter's cost follows only callers on the model's path, which the components the flags pick decide.
    described = (deployment_given(req), path.model if path is not None else None, req.attention_backend, req.quantization)
    digest = hashlib.blake2b(repr((COST_VERSION, sorted(bound.values.items()), bound.explicit, described)).encode(),
                             digest_size=16)
    return f"{scan_plan.memo_key}-cost-{digest.hexdigest()}"


def _carried_costs(scan_plan: ScanPlan, wanted: list[tuple[str, str, int, int, str]], path: modelpath.ModelPath | None
                   ) -> tuple[dict[Any, Any], list[str]] | None:
    """The costs the last run with these bound names computed on this very tree, if they cover ``wanted``.

    PERF: costing decodes the facts of the pools' and the findings' files (seconds on the sglang wheel);
    a warm scan of an unchanged tree reads one row instead.
    """
    key = _cost_key(scan_plan, path)
    if key is None:
        return None

    doc = carried.load_for_tree(scan_plan.index, key)
    if doc is None:
        return None
    table, unused = doc.get("costs"), doc.get("unused")
    if not (isinstance(table, dict) and isinstance(unused, list) and all(k in table for k in wanted)):
        return None
    return table, unused


def _store_costs(scan_plan: ScanPlan, got: tuple[dict[Any, Any], list[str]], path: modelpath.ModelPath | None) -> None:
    key = _cost_key(scan_plan, path)
    if key is None:
        return

    carried.store_for_tree(scan_plan.index, key, {"costs": got[0], "unused": got[1]})


_IGNORE_TEXT = re.compile(rb"castfind:\s*ignore", re.IGNORECASE)


def _unused_suppressions(scan_plan: ScanPlan, used: frozenset[tuple[str, str, int, str]]) -> list[Finding]:
    """CF001 for every ignore comment in the scanned roots (``--only``: in those files) that silenced nothing."""
    roots = set(scan_plan.roots)
    out: list[Finding] = []
    with_text = _files_with_ignores(scan_plan)
    for sf in scan_plan.index.files:
        if sf.abspath not in with_text or sf.root not in roots:
            continue
        try:
            text = sourcetext.decode(scan_plan.index.data(sf))
        except (SyntaxError, UnicodeError):  # reported as a parse error when the file was scanned
            continue
        out += fnd.unused_suppressions(sf.root, sf.path, sf.module, fnd.suppressions_in(text), used,
                                       UNUSED_SUPPRESSION)
    return out


def _has_ignore_text(data: bytes) -> bool:
    # PERF: the case-insensitive pattern has no literal prefix for the regex engine to skip by; the
    # lowered bytes (re.IGNORECASE on bytes folds ASCII only, as lower() does) rule out most files at once.
    return b"castfind:" in data.lower() and _IGNORE_TEXT.search(data) is not None


def _files_with_ignores(scan_plan: ScanPlan) -> set[str]:
    """The abspaths of the files (``--only``: of those files) whose text holds an ignore comment.

    PERF: carried with the digest of the tree it was computed on, so a warm scan of an unchanged tree
    reads only those files, not every file of the roots.
    """
    index, only = scan_plan.index, scan_plan.only

    def read() -> set[str]:
        return {sf.abspath for sf in index.files
                if (only is None or sf.abspath in only) and _has_ignore_text(index.data(sf))}

    if only is not None or index.cache is None or scan_plan.memo_key is None:
        return read()
    key = scan_plan.memo_key + "-ignores"

    ids = carried.file_ids(index)
    doc = carried.load_for_tree(index, key)
    stored = doc.get("files") if doc is not None else None
    if isinstance(stored, list):
        by_id = {v: k for k, v in ids.items()}
        return {by_id[i] for i in stored if i in by_id}
    found = read()
    carried.store_for_tree(index, key, {"files": sorted(ids[p] for p in found)})
    return found


def findings_at_ref(scan_plan: ScanPlan) -> tuple[Finding, ...]:
    """``--baseline-commit``: the findings (after suppression, before any baseline file) of the roots
    as they were at the plan's commit, read from git's objects into a scratch folder and scanned
    with the plan's rules, options, facts cache and carried results (which are not updated)."""
    if not scan_plan.baseline_commit:
        return ()
    cache = scan_plan.index.cache
    if cache is not None:  # exported once per commit and kept beside the facts (gitref.exported)
        return _scan_at_ref(scan_plan, gitref.exported(scan_plan.baseline_commit, cache.directory / "refs"))
    with tempfile.TemporaryDirectory(prefix="castfind-ref-") as scratch:
        return _scan_at_ref(scan_plan, gitref.export_roots(scan_plan.baseline_commit, scratch))


def _scan_at_ref(scan_plan: ScanPlan, roots: tuple[str, ...]) -> tuple[Finding, ...]:
    """The plan's scan over ``roots`` (REF's tree): its findings after suppression and CF001."""
    opts = scan_plan.request.index
    index = open_index(list(roots), exclude=tuple(scan_plan.config.exclude), cache_dir=opts.cache_dir,
                       use_cache=opts.use_cache, jobs=opts.jobs, follow_installed=opts.follow_installed,
                       max_file_size=opts.max_file_size)
    memo, carried_out, slot = None, None, None
    if index.cache is not None and scan_plan.memo_key is not None:

        # REF's tree has its own outcome slot: a warm run against the same REF carries both trees.
        if not scan_plan.request.index.follow_installed:
            slot = _outcome_key(scan_plan.memo_key, "ref")
            carried_out = _carried_outcome(index, slot)
        if carried_out is None:
            seed = scan_plan.memo_seed
            if seed is None and scan_plan.carried is not None:  # the work tree's outcome was carried
                seed = carried.loads(index.cache.get_memo(scan_plan.memo_key))
            memo = carried.Memo(index, Predicates(scan_plan.ruleset), seed)  # not saved: the carried steps stay the work tree's
    config = replace(scan_plan.config, roots=tuple(Path(r) for r in roots), baseline=None)
    request = replace(scan_plan.request, explain=False, stops=False, traces=(), write_baseline=None)
    at_ref = replace(scan_plan, config=config, roots=roots, index=index, request=request, only=None, memo=memo,
                     baseline_commit=(), carried=carried_out)
    out = run(at_ref)
    if carried_out is None and slot is not None:
        _store_outcome(at_ref, out, slot)
    return post(at_ref, out).report.findings


def _split_scope(found: Sequence[Finding], report_exclude: tuple[str, ...]) -> tuple[list[Finding], int]:
    """The findings in production code, and how many were set aside as outside the report scope.

    A finding measured outside every root (a CF900 with no root) has no path to judge: it is kept.
    """
    if not report_exclude:
        return list(found), 0
    kept = [f for f in found if not f.root or in_scope(f.path, report_exclude)]
    return kept, len(found) - len(kept)


def _join_traces(found: list[Finding], modules: Mapping[str, str], traces: Sequence[str],
                 roots: Sequence[str]) -> list[Finding]:
    """``found`` with each trace's measurements attached, plus CF900 findings for the casts no
    rule flagged; ``found`` itself when there are no traces (the runtime side is not imported)."""
    if not traces:
        return found
    from castfind.runtime.join import join
    from castfind.runtime.trace import read_trace

    sites: list[TraceSite] = []
    for t in traces:
        _, s = read_trace(t)
        sites += s
    return join(found, sites, dict(modules), roots=list(roots))


def report_rules(ruleset: RuleSet, unused_ignores: bool = False) -> tuple[Rule, ...]:
    """The rules a report describes: the rule set's, and CF900 (and with ``unused_ignores``, CF001)
    unless a rule file claims its id."""
    ids = {r.id for r in ruleset.rules}
    extra = [MEASURED_CAST] + ([UNUSED_SUPPRESSION] if unused_ignores else [])
    return (*ruleset.rules, *(r for r in extra if r.id not in ids))
