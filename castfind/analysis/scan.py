"""Scan: the pipeline from an index to findings (discover → extract → resolve → call graph → rules).

PERF (demand-driven): a cast can only be flagged when its operand is a whole buffer, and the walk
back from a cast stays inside its function, so the file must name a buffer attribute (as an
attribute: ``.kv_buffer``), a getter the rules list, or a getter the index infers. We therefore

1. infer getters from the files that name a getter-inferable buffer word and ``return`` (few);
2. parse only the files that hold a cast call *and* such a word or an inferred getter's name;
3. go *forward* from the candidates, and from the files that name a pool (a kind whose getters are
   inferred) with no cast of their own: a call that passes a whole buffer as an argument is a handoff
   (:mod:`castfind.analysis.summaries`), and adds the callee's file when it holds a cast (the callee casts a
   parameter with no buffer word in its file); the parameter's provenance runs back through it;
4. grow the call graph backwards from the functions holding a whole-buffer cast only, parsing a
   caller's file only when its text can call the function (:mod:`castfind.analysis.callgraph`), level by
   level in parallel batches.

Every choice of files is a text query (:mod:`castfind.store.textquery`), and every step is memoised
with what it read (:mod:`castfind.store.memo`), so a warm re-scan replays what did not change.
``demand=False`` parses every file and considers every cast; tests assert both give the same
findings, on the fixtures and on the real sglang wheel. Extraction is one path either way.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from castfind.analysis.callgraph import CallGraph
from castfind.analysis.checker import Checker, Explanation, StopTable, tally_stops
from castfind.analysis.getters import GetterOracle
from castfind.analysis.provenance import Provenance
from castfind.analysis.resolve import Resolver
from castfind.analysis.summaries import MAX_CALLS, Handoff, Summaries
from castfind.core.rules import RuleSet
from castfind.core.types import Diagnostic, Finding
from castfind.store.discover import SourceFile
from castfind.store.index import Index
from castfind.store.memo import Memo
from castfind.store.textquery import Predicates, TextQueries


@dataclass
class ScanOutcome:
    findings: list[Finding]
    diagnostics: list[Diagnostic]
    stats: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # root-relative path → module
    explanations: dict[tuple[str, int, int], Explanation] = field(default_factory=dict)  # per cast, with explain
    stops: StopTable | None = None  # with stops


def scan(index: Index, rules: RuleSet, *, demand: bool = True, only: set[str] | None = None,
         explain: bool = False, stops: bool = False, memo: Memo | None = None,
         report_exclude: tuple[str, ...] = ()) -> ScanOutcome:
    """Flag the whole-buffer casts under the index's roots. ``only``: absolute paths to report on.
    ``report_exclude``: the report scope's patterns (:mod:`castfind.core.scope`); calls from files outside
    it never make a function hot (:class:`~castfind.analysis.callgraph.CallGraph`), and a carried ``memo``
    must come from a run with the same patterns.

    ``memo`` carries results from an earlier run of the same configuration (:mod:`castfind.store.memo`);
    without one (and always with ``explain`` or ``demand=False``) everything is computed. ``stops``
    tallies where the proofs stopped (:func:`castfind.analysis.checker.tally_stops`): the carried steps still
    replay (getters, callers, hot paths), but the checker runs fresh on every candidate file, whose
    carried findings are neither used nor replaced, so the stops are this run's on a warm run too.
    """
    t0 = time.perf_counter()
    with index.parsing():  # PERF: one pool of workers for every batch this scan parses
        outcome = _scan(index, rules, demand, only, explain, stops, memo, report_exclude)
    outcome.stats["seconds"] = round(time.perf_counter() - t0, 3)
    return outcome


def _scan(index: Index, rules: RuleSet, demand: bool, only: set[str] | None, explain: bool, stops: bool,
          memo: Memo | None, report_exclude: tuple[str, ...]) -> ScanOutcome:
    index.read_all()
    files = index.files
    if memo is None or explain or not demand:
        memo = Memo(index, Predicates(rules))
    queries = TextQueries(index, memo)
    resolver = Resolver(index)
    graph = CallGraph(index, resolver, rules, queries, report_exclude)
    oracle = GetterOracle(index, rules, queries)

    if demand:
        if not memo.prev_steps:
            # PERF: nothing is carried, so every file these queries choose is parsed in this run: the workers
            # start on them now, while this process infers getters (Index.parse_ahead).
            index.parse_ahead(queries.select(("cand", ())) + queries.select(("source", ())))

        def infer() -> dict[str, str]:
            oracle.infer(queries.select(("seed",)), lambda names: queries.select(("contains", tuple(sorted(names)))))
            return dict(oracle.known)

        oracle.known.update(memo.step(("oracle",), infer))
        chosen = queries.select(("cand", tuple(sorted(oracle.known))))
        # A file with no cast can still hand a whole pool on (a framework layer passing each backend
        # its cache): read for its handoffs too. Only kinds whose getters are inferred: their words are
        # names of pools; a weight word is in most model files (both wheels: +1.4 MB against +11.6 MB).
        have = {sf.abspath for sf in chosen}
        sources = chosen + [sf for sf in queries.select(("source", tuple(sorted(oracle.known))))
                            if sf.abspath not in have]
    else:
        index.load_files(files)
        oracle.infer(files)
        chosen = sources = files
    getters = tuple(sorted(oracle.known.items()))
    prov = Provenance(rules, oracle.kind)
    summaries = Summaries(resolver, graph, prov)
    prov.across = summaries
    chosen = chosen + _forward(index, summaries, queries, sources, chosen, getters)
    candidates = [sf for sf in chosen if only is None or sf.abspath in only]
    checker = Checker(rules, prov, graph)

    def starts_of(sf: SourceFile) -> list[tuple[str, str]]:
        facts = index.facts_of(sf)
        if facts.error is not None:
            return []
        return list(dict.fromkeys(n for c in facts.casts for n in checker.hot_starts(facts, c)))

    fresh = explain or stops  # every cast explained: the check is not a carried step

    def check(sf: SourceFile) -> tuple[list[Finding], int]:
        facts = index.facts_of(sf)
        if facts.error is not None:
            return [], 0
        # Stored without the root as typed (`proj` or `.`): the loop below puts this run's in.
        return checker.check(facts, "", fresh), len(facts.casts)

    # Parse the candidates that no carried result covers in one parallel batch, then load the call
    # graph's files level by level (also in batches) before the sequential searches ask for them.
    # A file's findings depend on the handoffs into it (whole buffers its callers pass) and into their
    # callers (who hands those callers the buffer decides whether they run it per step): part of the key.
    keys = {sf.abspath: (sf.abspath, getters, _digest(summaries.handed_near(sf.module))) for sf in candidates}
    index.load_files([sf for sf in candidates if fresh or not memo.has(("check", *keys[sf.abspath]))])
    graph.prefetch(dict.fromkeys(n for sf in candidates for n in memo.step(("starts", *keys[sf.abspath]),
                                                                          partial(starts_of, sf))))
    findings: list[Finding] = []
    casts = 0
    modules: dict[str, str] = {}
    for sf in candidates:
        modules[sf.path] = sf.module
        found, n = check(sf) if fresh else memo.step(("check", *keys[sf.abspath]), partial(check, sf))
        findings += [replace(f, root=sf.root) for f in found]
        casts += n
    stats = {
        "files": len(files),
        "candidates": len(candidates),
        "parsed": index.parsed,
        "loaded": index.loaded,
        "replayed": memo.replayed,
        "casts": casts,
    }
    return ScanOutcome(findings, _diagnostics(index, memo), stats, modules,
                       checker.explanations if explain else {}, tally_stops(checker.explanations) if stops else None)


def _forward(index: Index, summaries: Summaries, queries: TextQueries, sources: list[SourceFile],
             chosen: list[SourceFile], getters: tuple) -> list[SourceFile]:
    """Go forward from ``sources``: record every call that hands a whole buffer to a parameter
    (:meth:`Summaries.handoffs`) and return the callee files, beyond ``chosen``, that hold a cast.

    Round one reads ``sources``; each later round (up to :data:`MAX_CALLS`) re-reads the files of the
    functions handed a buffer in the round before, now that their parameters are known whole, so a
    buffer passed on again (``forward`` → ``_run(kv)`` → ``kernel(kv)``) is followed. The rounds are
    the same whether ``sources`` are the demand-driven ones or every file. Each file's handoffs
    are a memoised step keyed by the handoffs known when it was read.
    """
    memo = queries.memo
    have = {sf.abspath for sf in chosen}
    with_casts = {sf.abspath for sf in queries.select(("casts",))}
    extra: dict[str, SourceFile] = {}
    frontier = sources

    def hands(sf: SourceFile, known: str) -> list[Handoff]:
        return memo.step(("hands", sf.abspath, getters, known), lambda: summaries.handoffs(index.facts_of(sf)))

    for _ in range(MAX_CALLS):
        # PERF: the handoffs known so far name the step by a digest (thousands of them in every key
        # would make the carried memo grow with files × handoffs).
        known = _digest(sorted(h for hs in summaries.handed.values() for h in hs))
        index.load_files([sf for sf in frontier if not memo.has(("hands", sf.abspath, getters, known))])
        # The callees' files the resolver reads are parsed in batches, not one at a time.
        new: list[Handoff] = [h for hs in index.in_batches(frontier, partial(hands, known=known)) for h in hs]
        before = {h for hs in summaries.handed.values() for h in hs}
        summaries.add(new)
        fresh = sorted({h[0] for h in new if h not in before})
        frontier = []
        for module in fresh:
            target = summaries.r.modules.file(module)
            if target is None or target.abspath not in with_casts:
                continue
            frontier.append(target)
            if target.abspath not in have:
                extra.setdefault(target.abspath, target)
        if not frontier:
            break
    return sorted(extra.values(), key=lambda sf: (sf.root, sf.path))


def _digest(items: Any) -> str:
    """A short, stable name for a (large) list of plain-data records, for a memo key."""
    return hashlib.blake2b(repr(items).encode(), digest_size=16).hexdigest()


def _diagnostics(index: Index, memo: Memo) -> list[Diagnostic]:
    """This run's diagnostics, plus those carried for files a replayed step read (not re-read now)."""
    out = list(index.diagnostics)
    seen = {(d.path, d.line, d.message) for d in out}
    return out + [d for d in memo.carried_diagnostics() if (d.path, d.line, d.message) not in seen]
