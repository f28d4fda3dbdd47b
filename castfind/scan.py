"""Scan: the pipeline from an index to findings (discover → extract → resolve → call graph → rules).

PERF (demand-driven): a cast can only be flagged when its operand is a whole buffer, and the walk
back from a cast stays inside its function, so the file must name a buffer attribute, a getter
the rules list, or a getter the index infers. We therefore

1. infer getters from the files that name a getter-inferable buffer word (few: KV/state names);
2. parse only the files that hold a cast call *and* a buffer word or an inferred getter name;
3. grow the call graph backwards from the flagged functions only (:mod:`castfind.callgraph`).

``demand=False`` parses every file and considers every cast; a test asserts both give the same
findings. Extraction is the same single path either way.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from castfind.callgraph import CallGraph
from castfind.checker import Checker
from castfind.discover import SourceFile
from castfind.facts import FileFacts
from castfind.index import Index
from castfind.provenance import Provenance
from castfind.resolve import Resolver
from castfind.rules import RuleSet
from castfind.types import Diagnostic, Finding

_RETURN = re.compile(rb"\breturn\b")


@dataclass
class ScanOutcome:
    findings: list[Finding]
    diagnostics: list[Diagnostic]
    stats: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # root-relative path → module
    explanations: dict[tuple[str, int], list[str]] = field(default_factory=dict)


class GetterOracle:
    """Names of functions whose every ``return`` is a whole buffer of one kind (inferred getters).

    Computed once per scan by a fixpoint (:meth:`infer`): a function is a getter when each of its
    returns walks back to a buffer attribute, a rules getter or an already inferred getter, and
    every other function of that name in the index agrees.
    """

    def __init__(self, index: Index, rules: RuleSet) -> None:
        self.index = index
        self.rules = rules
        self.kinds = {k.name for k in rules.buffers.values() if k.infer_getters}
        self.known: dict[str, str] = {}
        self.prov = Provenance(rules, self.known.get)

    def kind(self, name: str) -> str | None:
        return self.known.get(name)

    def _returns_kind(self, facts: FileFacts, qualname: str, rets: list) -> str | None:
        kinds: set[str] = set()
        for r in rets:
            o = self.prov.origin(facts, qualname, r.value, r.line)
            if o is None or o.kind not in self.kinds:
                return None
            kinds.add(o.kind)
        return kinds.pop() if len(kinds) == 1 else None

    def _agree(self, name: str, kind: str) -> bool:
        pat = re.compile(rb"\bdef\s+" + re.escape(name.encode()) + rb"\s*\(")
        files = [sf for sf in self.index.containing([name]) if pat.search(self.index.data(sf))]
        for facts in self.index.load_files(files):
            for d in facts.definitions:
                if d.name == name and d.kind != "class":
                    rets = [r for r in facts.returns if r.scope == d.qualname]
                    if rets and self._returns_kind(facts, d.qualname, rets) != kind:
                        return False
        return True

    def infer(self, pool: list[FileFacts], grow: Callable[[set[str]], list[FileFacts]] | None = None) -> None:
        """Fixpoint over the definitions in ``pool``; ``grow(new_names)`` adds files that name them."""
        if not self.kinds:
            return
        decided: set[str] = set()
        while True:
            cands: dict[str, str] = {}
            for facts in pool:
                by_scope: dict[str, list] = {}
                for r in facts.returns:
                    by_scope.setdefault(r.scope, []).append(r)
                for d in facts.definitions:
                    if d.kind == "class" or d.name in decided or d.name in cands:
                        continue
                    rets = by_scope.get(d.qualname)
                    if rets:
                        k = self._returns_kind(facts, d.qualname, rets)
                        if k is not None:
                            cands[d.name] = k
            new = {n: k for n, k in cands.items() if self._agree(n, k)}
            decided.update(cands)
            if not new:
                return
            self.known.update(new)
            if grow is not None:
                seen = {f.path for f in pool}
                pool = pool + [f for f in grow(set(new)) if f.path not in seen]


def _cast_regex(methods: set[str]) -> re.Pattern[bytes]:
    alts = "|".join(sorted(re.escape(m) for m in methods))
    return re.compile(rb"\.(?:" + alts.encode() + rb")\s*\(")


def scan(index: Index, rules: RuleSet, *, demand: bool = True, only: set[str] | None = None,
         explain: bool = False) -> ScanOutcome:
    """Flag the whole-buffer casts under the index's roots. ``only``: absolute paths to report on."""
    t0 = time.perf_counter()
    index.read_all()
    files = index.files
    cast_re = _cast_regex(rules.cast_methods())
    resolver = Resolver(index)
    graph = CallGraph(index, resolver, rules)
    oracle = GetterOracle(index, rules)

    if demand:
        inferable = rules.buffer_words(inferable_only=True)
        seed_files = [sf for sf in files if inferable is not None and inferable.search(index.data(sf))
                      and _RETURN.search(index.data(sf))]
        oracle.infer(index.load_files(seed_files), lambda names: index.load_files(index.containing(sorted(names))))
        words = rules.buffer_words()
        getters = sorted(oracle.known)
        extra = re.compile(rb"\b(?:" + b"|".join(re.escape(g.encode()) for g in getters) + rb")\b") if getters else None
        pool = [sf for sf in files if only is None or sf.abspath in only]
        candidates = [sf for sf in pool if cast_re.search(index.data(sf)) and
                      ((words is not None and words.search(index.data(sf)))
                       or (extra is not None and extra.search(index.data(sf))))]
    else:
        oracle.infer(index.load_files(files))
        candidates = [sf for sf in files if only is None or sf.abspath in only]

    checker = Checker(rules, Provenance(rules, oracle.kind), graph)
    findings: list[Finding] = []
    modules: dict[str, str] = {}
    by_file: list[tuple[SourceFile, FileFacts]] = list(zip(candidates, index.load_files(candidates)))
    # Load the call graph's files in parallel batches before the (sequential) searches ask for them.
    graph.prefetch(dict.fromkeys((facts.module, c.scope) for _, facts in by_file if facts.error is None
                                 for c in facts.casts if checker.needs_hot(facts, c)))
    for sf, facts in by_file:
        modules[sf.path] = sf.module
        if facts.error is None:
            findings += checker.check(facts, sf.root, explain)
    stats = {
        "files": len(files),
        "candidates": len(candidates),
        "parsed": index.parsed,
        "loaded": index.loaded,
        "casts": sum(len(f.casts) for _, f in by_file),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return ScanOutcome(findings, list(index.diagnostics), stats, modules, checker.explanations)
