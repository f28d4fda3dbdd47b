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
from typing import Any

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
    """Names of functions whose every ``return`` is a whole buffer of one kind (inferred getters)."""

    def __init__(self, index: Index, rules: RuleSet) -> None:
        self.index = index
        self.rules = rules
        self.kinds = {k.name for k in rules.buffers.values() if k.infer_getters}
        self.prov = Provenance(rules, self.kind)
        self._memo: dict[str, str | None] = {}
        self._depth = 0

    def kind(self, name: str) -> str | None:
        """The buffer kind every definition of ``name`` returns, or None."""
        if name in self._memo:
            return self._memo[name]
        if self._depth > 6 or not self.kinds:
            return None
        self._memo[name] = None  # recursion guard
        self._depth += 1
        try:
            result = self._infer(name)
        finally:
            self._depth -= 1
        self._memo[name] = result
        return result

    def _infer(self, name: str) -> str | None:
        pat = re.compile(rb"\bdef\s+" + re.escape(name.encode()) + rb"\s*\(")
        kinds: set[str] = set()
        files = [sf for sf in self.index.containing([name]) if pat.search(self.index.data(sf))]
        for facts in self.index.load_files(files):
            for d in facts.definitions:
                if d.name != name or d.kind == "class":
                    continue
                rets = [r for r in facts.returns if r.scope == d.qualname]
                if not rets:
                    continue  # abstract or raising: says nothing
                for r in rets:
                    o = self.prov.origin(facts, d.qualname, r.value, r.line)
                    if o is None or o.kind not in self.kinds:
                        return None
                    kinds.add(o.kind)
        return kinds.pop() if len(kinds) == 1 else None

    def seed(self, files: list[FileFacts]) -> set[str]:
        """Infer every getter defined in ``files`` (names of functions that return a buffer)."""
        names: set[str] = set()
        for facts in files:
            for d in facts.definitions:
                if d.kind != "class" and any(r.scope == d.qualname for r in facts.returns):
                    if self.kind(d.name) is not None:
                        names.add(d.name)
        return names


def _cast_regex(methods: set[str]) -> re.Pattern[bytes]:
    alts = "|".join(sorted(re.escape(m) for m in methods))
    return re.compile(rb"\.(?:" + alts.encode() + rb")\s*\(")


def _inferable_words(rules: RuleSet) -> re.Pattern[bytes] | None:
    import fnmatch

    alts: set[str] = set()
    for k in rules.buffers.values():
        if k.infer_getters:
            alts.update(re.escape(g) for g in k.getters)
            alts.update(fnmatch.translate(p).replace("(?s:", "(?:").replace(r")\Z", ")").replace(".*", r"\w*")
                        for p in k.attributes)
    return re.compile(rb"\b(?:" + "|".join(sorted(alts)).encode() + rb")\b") if alts else None


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
        inferable = _inferable_words(rules)
        seed_files = [sf for sf in files if inferable is not None and inferable.search(index.data(sf))
                      and _RETURN.search(index.data(sf))]
        getters = oracle.seed(index.load_files(seed_files))
        words = rules.buffer_words()
        extra = re.compile(rb"\b(?:" + b"|".join(re.escape(g.encode()) for g in sorted(getters)) + rb")\b") if getters else None
        pool = [sf for sf in files if only is None or sf.abspath in only]
        candidates = [sf for sf in pool if cast_re.search(index.data(sf)) and
                      (words.search(index.data(sf)) or (extra is not None and extra.search(index.data(sf))))]
    else:
        everything = index.load_files(files)
        oracle.seed(everything)
        candidates = [sf for sf in files if only is None or sf.abspath in only]

    checker = Checker(rules, Provenance(rules, oracle.kind), graph)
    findings: list[Finding] = []
    modules: dict[str, str] = {}
    by_file: list[tuple[SourceFile, FileFacts]] = list(zip(candidates, index.load_files(candidates)))
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
