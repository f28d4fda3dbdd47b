"""What ``castfind where`` answers (:class:`WhereResult` and its parts) and the carried answer.

A ``where`` is a pure function of the query, the files' bytes and which installed packages exist, so
its answer is stored under the query's key with what it was computed from
(:func:`castfind.store.memo.store_for_reads`: the files it read and those holding a name it looked for, by
content key; every other file by its stat; an answer that found nothing, whose suggestions read every file,
with the tree's digest: :func:`castfind.store.memo.store_for_tree`). An answer the time budget cut is stored too, with the budget
that cut it and how many lookups in a row it cut: the first cut answer is computed once more (the facts the
first try parsed are cached, so the second often ends within the budget), and one cut
:data:`REPLAY_AFTER_CUTS` times stands for a lookup allowed that many seconds or fewer (the same search
would stop as soon), never for one with more time or none (``--time-budget 0``), which computes, and
stores the whole answer over it. PERF: reading it back needs no resolver and no fact record:
:mod:`castfind.quick` answers a warm ``where`` from this module alone, without importing
:mod:`castfind.where.lookup` (the search) or :mod:`castfind.read.facts`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from castfind.core.scope import DEFAULT_REPORT_EXCLUDE
from castfind.core.types import Diagnostic, Hop
from castfind.store import memo as carried
from castfind.store.discover import Package, package_roots
from castfind.store.index import Index
from castfind.store.modules import Modules
from castfind.store.words import Words

#: Bytes of source not parsed before that one lookup may parse to find aliases, call sites and (for a
#: bare name) bindings that do not look like one. PERF: libcst extracts ~130 KB of source a second per
#: core, so a name that common code mentions everywhere (``grad`` in torch: 246 files, 16 MB) would take
#: minutes; past the budget the files left are named in one ``unresolved`` entry instead. Files whose
#: facts are cached cost nothing. None: no budget (``--parse-budget 0``).
DEFAULT_PARSE_BUDGET = 512 * 1024  # --parse-budget 512K


#: Seconds one lookup may spend, counted from before its index is opened, before what is left of its search
#: for aliases and call sites (and a bare name's bindings) is named in ``unresolved``. The definition chain
#: of a dotted name or ``--at`` is resolved first and whole, past it: a lookup out of time still says where
#: the symbol is defined. PERF: a person waits for ``where``; 10 s cold, whole process, on two loaded cores
#: is the bound; starting Python and importing castfind come before the clock, storing the answer (the content keys of
#: the files it read) after it. A parse cannot stop halfway: one that would not end within
#: the budget at the rate measured is not started. None: no budget (``--time-budget 0``).
DEFAULT_TIME_BUDGET = 6.0
#: The environment variable that sets the time budget when ``--time-budget`` is not given (0: none).
#: The test suite sets it to 0: an answer must not depend on how loaded the machine is.
TIME_BUDGET_ENV = "CASTFIND_WHERE_TIME_BUDGET"


def time_budget(given: float | None = None) -> float | None:
    """The time budget in seconds (None: none): ``given`` (``--time-budget``), else ``$CASTFIND_WHERE_TIME_BUDGET``,
    else :data:`DEFAULT_TIME_BUDGET`; 0 means none. Raises :class:`WhereError` for a negative or unreadable value."""
    source = "--time-budget"
    if given is None:
        text = os.environ.get(TIME_BUDGET_ENV, "").strip()
        if not text:
            return DEFAULT_TIME_BUDGET
        source = TIME_BUDGET_ENV
        try:
            given = float(text)
        except ValueError:
            raise WhereError(f"{TIME_BUDGET_ENV}={text}: expected seconds (such as 5 or 2.5), or 0 for no limit") from None
    if not given >= 0:  # NaN too
        raise WhereError(f"{source} {given}: expected seconds (such as 5 or 2.5), or 0 for no limit")
    return None if given == 0 else given


class WhereError(Exception):
    """A usage error: malformed symbol, ``--at`` naming no indexed file."""


@dataclass(frozen=True, slots=True)
class Location:
    """A call site; ``test``: in a file outside the report scope (tests, benchmarks: :mod:`castfind.core.scope`)."""

    root: str
    path: str
    line: int
    test: bool = False


@dataclass(frozen=True, slots=True)
class WhereDefinition:
    qualname: str
    kind: Literal["function", "class", "method", "alias", "variable", "module"]
    root: str
    path: str
    line: int
    chain: tuple[Hop, ...]
    exact: bool  # the definition's own name is the queried name
    #: A candidate, not a resolution: the receiver's type is unknown (``reason`` says why).
    dynamic: bool = False
    reason: str = ""
    #: For an ``alias`` (``PublicName = _Private`` at module level, on the way to a definition): the
    #: qualified name of the definition it stands for.
    target: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "qualname": self.qualname, "kind": self.kind, "root": self.root, "path": self.path,
            "line": self.line,
            "chain": [{"path": h.path, "line": h.line, "kind": h.kind, "text": h.text} for h in self.chain],
        }
        if self.target:
            out["target"] = self.target
        if self.dynamic:
            out["dynamic"] = True
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, slots=True)
class Unresolved:
    root: str
    path: str
    line: int
    reason: str


@dataclass(frozen=True)
class WhereResult:
    symbol: str
    definitions: tuple[WhereDefinition, ...]
    call_sites: tuple[Location, ...]
    unresolved: tuple[Unresolved, ...]
    suggestions: tuple[str, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)
    packages: tuple[Package, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (exactly these four keys)."""
        return {
            "symbol": self.symbol,
            "definitions": [d.to_dict() for d in self.definitions],
            "call_sites": [{"path": c.path, "line": c.line, "test": c.test} for c in self.call_sites],
            "unresolved": [{"path": u.path, "line": u.line, "reason": u.reason} for u in self.unresolved],
        }



def carried_answer(index: Index, symbol: str, report_exclude: tuple[str, ...] = DEFAULT_REPORT_EXCLUDE,
                   at: tuple[str, int] | None = None, budget: int | None = DEFAULT_PARSE_BUDGET,
                   seconds: float | None = None) -> WhereResult | None:
    """What :func:`where` answers when its answer is carried (None: it would resolve, or there is no
    cache); ``seconds`` as :func:`where` takes it (:func:`time_budget`). Raises :class:`WhereError` for a
    malformed query or time budget."""
    check_symbol(symbol)
    clock = time_budget(seconds)
    if index.cache is None:
        return None
    return load_answer(index, answer_key(index, symbol, at, report_exclude, budget), clock, report_exclude)


def check_symbol(symbol: str) -> None:
    """Raise :class:`WhereError` unless ``symbol`` is a name, a dotted path or ``Class.method``."""
    # Python identifiers are Unicode (PEP 3131): `где_ядро`, `café` and `Ωmega.f` are names.
    if not all(part.isidentifier() for part in symbol.split(".")):
        raise WhereError(f"{symbol!r} is not a Python name, dotted path or Class.method")


def answer_key(index: Index, symbol: str, at: tuple[str, int] | None, report_exclude: tuple[str, ...],
               budget: int | None) -> str:
    """The key a ``where`` answer is stored under (:func:`store_answer`): the query and all it depends on
    besides the tree."""
    # The roots discovery found: an installed package an earlier lookup joined to this index is not a root.
    roots = sorted((r, os.path.abspath(r)) for r in {sf.root for sf in index.discovered()})
    at_key = None if at is None else (os.path.abspath(at[0]), at[0], at[1])
    return "where-" + carried.config_key(symbol, at_key, tuple(report_exclude), roots, index.follow_installed,
                                         os.getcwd() if at is not None else "", budget)


#: How many lookups in a row the time budget must cut before their cut answer is replayed (the first
#: one is computed again: its facts cached, the second try may end within the budget).
REPLAY_AFTER_CUTS = 2


def cuts_before(index: Index, key: str, seconds: float | None) -> int:
    """How many lookups in a row a budget of ``seconds`` or more cut, as stored under ``key`` for this
    tree (0: none, or the stored answer is whole)."""
    assert index.cache is not None
    doc = carried.loads(index.cache.get_memo(key))
    if doc is None or not _stands_for(doc.get("cut"), seconds) or not carried.current(index, doc):
        return 0
    cuts = doc.get("cuts")
    return cuts if isinstance(cuts, int) and doc.get("cut") is not None else 0


def _stands_for(cut: Any, seconds: float | None) -> bool:
    """Does an answer cut by a budget of ``cut`` seconds (None: whole) stand for a lookup given ``seconds``?"""
    return cut is None or (isinstance(cut, float) and seconds is not None and seconds <= cut)


def load_answer(index: Index, key: str, seconds: float | None,
                report_exclude: tuple[str, ...] = DEFAULT_REPORT_EXCLUDE) -> WhereResult | None:
    """The stored answer, when what it was computed from (:func:`store_answer`), the installed packages it looked
    for and the top-level packages under the roots (``report_exclude`` set aside) are as they were, and it is
    whole or was cut :data:`REPLAY_AFTER_CUTS` times by a time budget of ``seconds`` (the lookup's:
    None, none) or more."""
    assert index.cache is not None
    doc = carried.loads(index.cache.get_memo(key))
    if doc is None:
        return None
    installed, plain, cut, cuts = doc.get("installed"), doc.get("result"), doc.get("cut"), doc.get("cuts")
    if not (isinstance(installed, dict) and isinstance(plain, tuple) and _stands_for(cut, seconds)
            and (cut is None or (isinstance(cuts, int) and cuts >= REPLAY_AFTER_CUTS))):
        return None  # a cut answer does not stand for a lookup given more time than the one that cut it
    modules = Modules(index)
    if any(modules.add_installed(top) != found for top, found in installed.items()):
        return None  # a package was installed or removed since: resolve again
    # After the packages: looking for one may add its files. PERF: a row stored by what the lookup read reads
    # nothing back but those files' keys (castfind.store.memo.load_for_reads); its own check of the other files
    # may store it again, stamped with their stats.
    if "tree" in doc and not carried.same_tree(index, doc):
        return None
    if "tree" not in doc and carried.load_for_reads(index, key) is None:
        return None
    try:
        result = _from_plain(plain)
    except (TypeError, ValueError):  # a row of another shape: compute
        return None
    if "tree" not in doc and doc.get("listed") != _listed(index, report_exclude):
        return None  # a top-level package came or went: the packages the answer names are the listing's
    seen = {(d.path, d.line, d.message) for d in index.diagnostics}
    diags = (*index.diagnostics, *(d for d in result.diagnostics if (d.path, d.line, d.message) not in seen))
    stats = {**result.stats, "parsed": 0, "loaded": 0, "outcome": "carried"}
    return replace(result, diagnostics=diags, stats=stats)


def store_answer(index: Index, key: str, result: WhereResult, installed: dict[str, bool],
                 cut: float | None = None, cuts: int = 0, reads: Iterable[str] | None = None,
                 names: Iterable[str] = (), report_exclude: tuple[str, ...] = DEFAULT_REPORT_EXCLUDE) -> None:
    """Store ``result`` under ``key``, with the installed packages it looked for (``installed``: top-level name →
    found), read back by :func:`load_answer`; ``cut``: the time budget (seconds) that cut it, None for a whole
    answer; ``cuts``: how many lookups in a row it cut, this one included.

    ``reads``: what the lookup read (:meth:`castfind.store.memo.Tracker.recording`) and ``names``, the names it
    looked for in the files' text (:func:`castfind.store.words.names_asked`): the answer is stored with them
    (:func:`castfind.store.memo.store_for_reads`: the files it read and those holding one of the names, by content
    key, the others by stat). PERF: a cold lookup hashes only those files, not all 8,000 of both wheels, and an
    edit of a file that holds none of the names leaves the answer carried. Without ``reads``, or for an answer
    that found nothing (its suggestions are read off every file's definitions), it is stored for the whole tree
    (:func:`castfind.store.memo.store_for_tree`)."""
    payload = {"installed": installed, "cut": None if cut is None else float(cut), "cuts": cuts,
               "result": _to_plain(replace(result, diagnostics=tuple(d for d in result.diagnostics if d.kind != "cache")))}
    if reads is None or not (result.definitions or result.unresolved):
        carried.store_for_tree(index, key, payload)
        return
    names = sorted(set(names))
    holders = {sf.abspath for sf in Words(index).containing(names)}
    carried.store_for_reads(index, key, {**payload, "listed": _listed(index, report_exclude)}, {*reads, *holders}, names)


def _listed(index: Index, report_exclude: tuple[str, ...]) -> tuple[tuple[str, str, str | None], ...]:
    """The top-level packages discovery found under the roots (not those of installed packages that joined)."""
    return tuple((p.name, p.root, p.folder)
                 for p in package_roots(index.discovered(), report_exclude))


def _to_plain(r: WhereResult) -> tuple[Any, ...]:
    """The answer as tuples of plain values (what :mod:`castfind.read.codec` stores)."""
    defs = tuple((d.qualname, d.kind, d.root, d.path, d.line,
                  tuple((h.root, h.path, h.line, h.kind, h.text) for h in d.chain), d.exact, d.dynamic, d.reason,
                  d.target)
                 for d in r.definitions)
    return (r.symbol, defs, tuple((c.root, c.path, c.line, c.test) for c in r.call_sites),
            tuple((u.root, u.path, u.line, u.reason) for u in r.unresolved), r.suggestions, r.diagnostics,
            r.stats, tuple((p.name, p.root, p.folder) for p in r.packages))


def _from_plain(t: tuple[Any, ...]) -> WhereResult:
    symbol, defs, sites, unresolved, sugg, diags, stats, packages = t
    if not (isinstance(stats, dict) and all(isinstance(d, Diagnostic) for d in diags)):
        raise TypeError("not a carried where answer")
    return WhereResult(
        symbol,
        tuple(WhereDefinition(q, k, root, path, line, tuple(Hop(*h) for h in chain), exact, dyn, reason, target)
              for q, k, root, path, line, chain, exact, dyn, reason, target in defs),
        tuple(Location(*c) for c in sites), tuple(Unresolved(*u) for u in unresolved), tuple(sugg), tuple(diags),
        dict(stats), tuple(Package(*p) for p in packages))
