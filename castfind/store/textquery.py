"""Text queries: which files can matter to a scan, decided from their bytes without parsing.

PERF: parsing is the cost of a scan (libcst: about 0.5 MB/s on two cores), reading is not. Every
choice of files to parse goes through one of these queries, each a pure function of one file's
bytes (and its module name), named by a hashable key:

- ``("seed",)``          names a getter-inferable buffer word and has a ``return`` (getter inference);
- ``("cand", getters)``  has a cast call and names a whole-buffer word or an inferred getter;
- ``("casts",)``         has a cast call (a callee a whole buffer is handed to may cast it);
- ``("source", getters)`` names a buffer word of a kind whose getters are inferred, or an inferred
  getter, cast or no cast (it may hand a whole buffer to a callee that casts it);
- ``("contains", names)`` holds one of ``names`` as a whole word;
- ``("defines", name)``  holds a ``def name(`` line;
- ``("calls", name, module)`` may hold a call that reaches function ``name`` of ``module``.

Because a key says all a query depends on, the results of one run can be carried to the next
(:mod:`castfind.store.memo`) and updated by re-asking only the files whose bytes changed.
Each query is a *superset* of the files whose facts could satisfy it, so no result is lost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import Literal

from castfind.core.rules import AnyPattern, RuleSet
from castfind.core.sourcetext import CALL_GAP, word_start
from castfind.store.discover import SourceFile
from castfind.store.index import Index
from castfind.store.memo import Memo, Predicate, QueryKey
from castfind.store.words import Words

_RETURN = re.compile(rb"\breturn\b")
_DEF_PREFIX = re.compile(rb"[ \t]*(?:async[ \t]+)?def[ \t]+")
_DEF_INDENT = re.compile(rb"[ \t]*(?:async[ \t]+)?")
_STAR_IMPORT = re.compile(rb"\bimport[ \t]+\*")
# `def name(` anywhere (no line anchor): a file holds `def[ \t]+NAME[ \t]*[(\[]` for an identifier NAME exactly
# when NAME is one of this pattern's matches (no match of it can overlap another `def`, so none is hidden).
_DEF_NAME = re.compile(rb"def[ \t]+([A-Za-z0-9_\x80-\xff]+)[ \t]*[(\[]")
#: PERF: the patterns built from names, compiled once per process. ``re``'s own cache holds 512 and a run builds
#: more (594 per save in the language server, warm on both wheels: it compiled 520 of them again at every save,
#: 0.3 s of it); a compiled pattern is immutable, so threads share it.
_compile = lru_cache(maxsize=16384)(re.compile)


def _text(part: Hashable) -> str:
    """A name in a query key."""
    assert isinstance(part, str), part
    return part


def _texts(part: Hashable) -> tuple[str, ...]:
    """A tuple of names in a query key."""
    assert isinstance(part, tuple), part
    return part


def _word(name: str) -> re.Pattern[bytes]:
    return _compile(word_start(re.escape(name.encode())) + rb"\b")


def def_line(name: str) -> re.Pattern[bytes]:
    """``def name(`` or ``async def name[`` at the start of a line (any indentation)."""
    return _compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+" + re.escape(name.encode()) + rb"[ \t]*[(\[]", re.M)


def def_lines(name: str) -> Callable[[bytes], int]:
    """How many lines of a text :func:`def_line` matches.

    PERF: a multi-line ``^`` pattern is tried at every line start. The unanchored ``def name(`` is found
    by a fast scan, and only its line's start is checked. Each line holds at most one match (its first
    word is ``def`` or ``async``), and no unanchored match can hide another's ``def``.
    """
    quick = _compile(rb"def[ \t]+" + re.escape(name.encode()) + rb"[ \t]*[(\[]")

    def count(data: bytes) -> int:
        n = 0
        for m in quick.finditer(data):
            start = m.start()
            if _DEF_INDENT.fullmatch(data, data.rfind(b"\n", 0, start) + 1, start):
                n += 1
        return n

    return count


def cast_regex(methods: set[str]) -> re.Pattern[bytes]:
    alts = "|".join(sorted(re.escape(m) for m in methods))
    return _compile(rb"\.(?:" + alts.encode() + rb")\s*\(")


#: Which module's ``name`` a file's calls can reach: ``"any"`` (a dotted call ``x.name(``, or a bare
#: ``name(`` in a file that can bind the name some other way: a star import, or the name outside its
#: calls), ``"own"`` (bare calls and nothing else that binds it: only the file's own module) or ``"none"``.
#: It does not depend on the module asked about.
CallShape = Literal["any", "own", "none"]


def call_shape(name: str) -> Callable[[bytes], CallShape]:
    """The test behind :func:`calls_predicate`, for one name and any module."""
    call = _compile(word_start(re.escape(name.encode())) + CALL_GAP + rb"\(")
    word = _word(name)
    enc = name.encode()

    def shape(data: bytes) -> CallShape:
        if enc not in data:
            return "none"
        bare = False
        for m in call.finditer(data):
            line_start = data.rfind(b"\n", 0, m.start()) + 1
            if _DEF_PREFIX.fullmatch(data, line_start, m.start()):
                continue
            if data[line_start:m.start()].rstrip().endswith(b"."):
                return "any"
            bare = True
        if not bare:
            return "none"
        if _STAR_IMPORT.search(data) or len(word.findall(data)) > len(call.findall(data)):
            return "any"
        return "own"

    return shape


def calls_predicate(name: str, module: str, shapes: dict[str, CallShape] | None = None) -> Predicate:
    """A call of ``name`` outside a ``def`` line that can reach ``module.name``.

    A call site is ``name`` then ``(`` (whitespace, comments and line continuations may sit
    between). A dotted call (``x.name(``) always counts. A bare call (``name(``) can only resolve
    to ``module.name`` in ``module`` itself, through a star import, or when the file binds ``name``
    some other way (an import, an alias): the file must then mention ``name`` outside its calls.

    ``shapes`` (file abspath → :data:`CallShape`) is shared by the queries of one name during a run.
    PERF: a method name (``forward``, ``apply``) is asked about once per module that defines it;
    the file's shape does not depend on the module, so its text is searched once, not once a module.
    """
    shape = call_shape(name)
    cache: dict[str, CallShape] = {} if shapes is None else shapes

    def pred(sf: SourceFile, data: bytes) -> bool:
        got = cache.get(sf.abspath)
        if got is None:
            got = cache[sf.abspath] = shape(data)
        return got == "any" or (got == "own" and sf.module == module)

    return pred


def _any_word(names: tuple[str, ...]) -> re.Pattern[bytes] | None:
    """Any of ``names`` as a whole word (None for no names)."""
    if not names:
        return None
    return _compile(b"(?:" + b"|".join(word_start(re.escape(n.encode())) for n in names) + rb")\b")


#: The file tests several queries share (:func:`_shared`): a buffer word of a kind whose getters are
#: inferred, any whole-buffer word, a cast call.
SharedTest = Literal["pool", "word", "cast"]


def _shared(name: SharedTest, rules: RuleSet, tests: dict[str, dict[str, bool]] | None) -> Callable[[SourceFile, bytes], bool]:
    """The file test ``name`` (:data:`SharedTest`), answered once per file: ``tests`` (test → file abspath →
    answer) is shared by the queries of a run.

    PERF: each pattern costs 0.1–0.6 s over both wheels, and several queries ask it of every file: the
    getter seeds and the handoff sources the pool words; the candidates (with and without the inferred
    getters' names) and the files with a cast the cast pattern.
    """
    pat: AnyPattern | re.Pattern[bytes] | None
    if name == "pool":
        pat = rules.buffer_words(inferable_only=True)
    elif name == "word":
        pat = rules.buffer_words()
    else:
        pat = cast_regex(rules.cast_methods())
    seen: dict[str, bool] = {} if tests is None else tests.setdefault(name, {})

    def answer(sf: SourceFile, data: bytes) -> bool:
        got = seen.get(sf.abspath)
        if got is None:
            got = seen[sf.abspath] = pat is not None and pat.search(data) is not None
        return got

    return answer


def predicate(key: QueryKey, rules: RuleSet, shapes: dict[str, CallShape] | None = None,
              tests: dict[str, dict[str, bool]] | None = None,
              defs: dict[str, frozenset[bytes]] | None = None) -> Predicate:
    """The file test a query key names (``shapes``: see :func:`calls_predicate`; ``tests``: see
    :func:`_shared`; ``defs``: file abspath → the names after its unanchored ``def``, shared by the
    ``defines`` queries of a run)."""
    kind = key[0]
    if kind == "seed":
        pool = _shared("pool", rules, tests)
        return lambda sf, data: pool(sf, data) and _RETURN.search(data) is not None
    if kind == "source":
        pool = _shared("pool", rules, tests)
        named = _texts(key[1])
        known = _any_word(named)
        literals = [n.encode() for n in named]
        # PERF: a getter's name as plain bytes first; the word pattern only where one is.
        return lambda sf, data: pool(sf, data) or (
            known is not None and any(g in data for g in literals) and known.search(data) is not None)
    if kind == "cand":
        cast, word = _shared("cast", rules, tests), _shared("word", rules, tests)
        extra = _any_word(_texts(key[1]))
        return lambda sf, data: cast(sf, data) and (
            word(sf, data) or (extra is not None and extra.search(data) is not None))
    if kind == "casts":
        return _shared("cast", rules, tests)
    if kind == "contains":
        pats = [_word(n) for n in _texts(key[1])]
        return lambda sf, data: any(p.search(data) for p in pats)
    if kind == "defines":
        name = _text(key[1]).encode()
        lines = def_lines(_text(key[1]))
        if _DEF_NAME.fullmatch(b"def " + name + b"(") is None:  # not a name the shared table can hold
            return lambda sf, data: lines(data) > 0
        # PERF: the names after a `def` are found once per file (a scan asks about thousands of names).
        names = defs if defs is not None else {}

        def defines(sf: SourceFile, data: bytes) -> bool:
            got = names.get(sf.abspath)
            if got is None:
                got = names[sf.abspath] = frozenset(_DEF_NAME.findall(data))
            return name in got and lines(data) > 0

        return defines
    if kind == "calls":
        return calls_predicate(_text(key[1]), _text(key[2]), shapes)
    raise ValueError(f"unknown text query {key!r}")


def words_of(key: QueryKey) -> list[str]:
    """Identifiers every matching file must hold (a cheap first filter), or [] when none is implied."""
    kind = key[0]
    if kind == "contains":
        return list(_texts(key[1]))
    if kind in ("defines", "calls"):
        return [_text(key[1])]
    return []


class Predicates:
    """The file test each query key names under one rule set (:func:`predicate`), made once per key: what a
    :class:`~castfind.store.memo.Memo` is built with, to re-ask a carried query on the changed files and to ask
    a new one (:class:`TextQueries`). The tables the tests of a run share are kept here."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self._preds: dict[QueryKey, Predicate] = {}
        self._shapes: dict[str, dict[str, CallShape]] = {}  # name → file abspath → its call shape (a run's files)
        self._tests: dict[str, dict[str, bool]] = {}  # shared test → file abspath → its answer (a run's files)
        self._defs: dict[str, frozenset[bytes]] = {}  # file abspath → the names it has a `def` of (a run's files)

    def __call__(self, key: QueryKey) -> Predicate:
        got = self._preds.get(key)
        if got is None:
            shapes = self._shapes.setdefault(_text(key[1]), {}) if key[0] == "calls" else None
            got = self._preds[key] = predicate(key, self.rules, shapes, self._tests, self._defs)
        return got


class TextQueries:
    """Runs text queries over an index's files, carrying their answers in a :class:`~castfind.store.memo.Memo`
    (whose :attr:`~castfind.store.memo.Memo.predicate` says what each query tests)."""

    def __init__(self, index: Index, memo: Memo) -> None:
        self.index = index
        self.memo = memo
        self.words = Words(index)
        self._pos = {sf.abspath: i for i, sf in enumerate(index.files)}

    @classmethod
    def fresh(cls, index: Index, rules: RuleSet) -> TextQueries:
        """Text queries that carry nothing from an earlier run (a memo of their own)."""
        return cls(index, Memo(index, Predicates(rules)))

    def select(self, key: QueryKey) -> list[SourceFile]:
        """The files a query selects, in discovery order."""
        paths = self.memo.select(key, lambda: self._full(key))
        by = self.index.by_abspath
        pos = self._pos
        return [by[p] for p in sorted(paths, key=lambda p: pos.get(p, len(pos)))]

    def _full(self, key: QueryKey) -> list[SourceFile]:
        pred = self.memo.predicate(key)
        words = words_of(key)
        pool = self.words.containing(words) if words else self.index.files
        return [sf for sf in pool if pred(sf, self.index.data(sf))]
