"""Results carried from one scan to the next, so a warm re-scan costs about reading the files.

A scan is a pure function of its configuration (roots, rules, options) and the files' bytes.
Its expensive steps — getter inference, each function's callers and hot path, each candidate
file's findings — are memoised here with what they *depended on*:

- the files whose facts they read (the :class:`~castfind.store.index.Index` reports every access to
  this module's :class:`Tracker`, including reads answered from an in-run cache
  (:meth:`Tracker.cached`), which replay the dependencies they were built with);
- the text queries they asked (:mod:`castfind.store.textquery`), by key;
- a module name they looked for and did not find (``m:<module>``), since adding it could change them.

On the next run with the same configuration, the files whose content key changed (or that
appeared or vanished) are *invalid*; a text query is invalid when re-asking it on those files
gives another answer than last time; a step is replayed only when none of its dependencies is
invalid, and recomputed otherwise. Nothing else is trusted: a missing, foreign or damaged memo
just means computing everything.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from castfind.core.sourcetext import has_word
from castfind.core.versions import EXTRACTOR_VERSION
from castfind.read import codec
from castfind.store.discover import SourceFile
from castfind.store.index import Index

MEMO_VERSION = 3

StepKey = tuple[Hashable, ...]
#: A text query's key (:mod:`castfind.store.textquery`): it names all the query depends on.
QueryKey = tuple[Hashable, ...]
#: A text query's test of one file (its bytes and module name): does the query select it?
Predicate = Callable[[SourceFile, bytes], bool]
T = TypeVar("T")


class Tracker:
    """The one place dependencies are recorded: what the running computations read.

    A dependency is a string: a file's absolute path (its facts or text were read), ``q:<key>``
    (a text query's answer) or ``m:<module>`` (a module looked for and not found). Readers
    (:class:`~castfind.store.index.Index`, :class:`~castfind.store.modules.Modules`, :class:`Memo`) report
    them with :meth:`read`; every computation open in :meth:`recording` collects them.

    :meth:`cached` is the in-run memo the resolver and the call graph use: a value is computed
    once per run and a later hit replays the dependencies it was built with, so a persisted
    :meth:`Memo.step` that reaches it records them too.
    """

    def __init__(self) -> None:
        self._open: list[set[str]] = []
        self._values: dict[Hashable, tuple[Any, frozenset[str]]] = {}
        self._sets: dict[frozenset[str], frozenset[str]] = {}

    def intern(self, deps: Iterable[str]) -> frozenset[str]:
        """One shared frozenset per distinct set of dependencies. PERF: on both wheels ~28,000 steps
        hold only ~4,000 distinct sets (of ~450 files each): shared, they cost 0.3 M entries, not 10 M."""
        fs = frozenset(deps)
        return self._sets.setdefault(fs, fs)

    @classmethod
    def of(cls, index: Index) -> Tracker:
        """The index's tracker (one per index, so every reader reports to the same one), made and installed
        as the index's observer (:class:`~castfind.store.index.ReadObserver`) on first use."""
        tables = _tables(index)
        got = tables.tracker
        if got is None:
            got = tables.tracker = cls()
            index.observer = got
        return got

    @contextmanager
    def recording(self) -> Iterator[set[str]]:
        """Collect what is read while the block runs."""
        deps: set[str] = set()
        self._open.append(deps)
        try:
            yield deps
        finally:
            self._open.pop()

    def read(self, deps: Iterable[str]) -> None:
        """Report dependencies to every open recording."""
        if self._open:
            deps = tuple(deps)
            for t in self._open:
                t.update(deps)

    def forget(self) -> None:
        """Drop every value memoised so far: computations cut short (a lookup's time budget ran out) left
        values that are not the whole answer, and a later computation must not replay them."""
        self._values.clear()

    def cached(self, key: Hashable, compute: Callable[[], T], pending: T) -> T:
        """``compute()``, once per run per ``key``; a re-entrant call (a cycle) sees ``pending``."""
        got = self._values.get(key)
        if got is not None:
            self.read(got[1])
            return got[0]
        self._values[key] = (pending, frozenset())
        try:
            with self.recording() as deps:
                value = compute()
        except BaseException:
            del self._values[key]  # not computed (e.g. a file to parse first, :meth:`Index.in_batches`)
            raise
        self._values[key] = (value, self.intern(deps))
        return value


class _Tables:
    """What this module keeps per :class:`~castfind.store.index.Index` (:func:`_tables`): its :class:`Tracker`, and
    :func:`tree_digest`, :func:`file_ids` and the roots' numbers (:func:`_numbering`) by file count (an index's
    files are only added to, and a file's key is fixed once found, so its file count names its tree)."""

    __slots__ = ("file_ids", "root_numbers", "tracker", "tree_digests")

    def __init__(self) -> None:
        self.tracker: Tracker | None = None
        self.tree_digests: dict[int, str] = {}
        self.file_ids: dict[int, dict[str, str]] = {}
        self.root_numbers: dict[int, tuple[dict[str, int], dict[str, int]]] = {}


#: Each live index's tables; an index no one holds any more takes its tables with it.
_TABLES: weakref.WeakKeyDictionary[Index, _Tables] = weakref.WeakKeyDictionary()


def _tables(index: Index) -> _Tables:
    got = _TABLES.get(index)
    if got is None:
        got = _TABLES[index] = _Tables()
    return got


def _code_digest() -> str:
    """castfind's own source, every module of the package: results carried by another version of the code are
    never replayed."""
    global _CODE
    if _CODE is None:
        h = hashlib.blake2b(digest_size=16)
        pkg = Path(__file__).resolve().parents[1]  # castfind/, not castfind/store/ (this module's own folder)
        for p in sorted(pkg.rglob("*.py")):
            h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes())
        _CODE = h.hexdigest()
    return _CODE


_CODE: str | None = None


def config_key(*parts: Any) -> str:
    """A digest of everything a scan's results depend on besides the files' bytes (code included)."""
    blob = repr((MEMO_VERSION, EXTRACTOR_VERSION, _code_digest()) + tuple(parts)).encode()
    return "scan-" + hashlib.blake2b(blob, digest_size=16).hexdigest()


class Memo:
    """This run's steps and text queries, seeded from the previous run's where still valid."""

    def __init__(self, index: Index, predicate: Callable[[QueryKey], Predicate],
                 previous: dict[str, Any] | None = None, after: Memo | None = None) -> None:
        self.index = index
        self.tracker = Tracker.of(index)
        #: The file test a query key names (:class:`castfind.store.textquery.Predicates`): how a carried query is
        #: re-asked on the changed files, and how :class:`castfind.store.textquery.TextQueries` asks a new one.
        self.predicate = predicate
        self.keys = {sf.abspath: index.key(sf) for sf in index.files}
        self.modules = {sf.abspath: sf.module for sf in index.files}
        # Stored results name files by root and path, never by absolute path or the root as typed:
        # `scan proj` and `cd proj && scan .` (or a copy of the tree elsewhere) share them.
        self._rel = file_ids(index)
        absolute = {v: k for k, v in self._rel.items()}
        prev = previous if isinstance(previous, dict) and previous.get("version") == MEMO_VERSION else None
        prev_steps: dict[StepKey, tuple[Any, frozenset[str]]] = {}
        if after is not None:
            # PERF (a warm process, :class:`castfind.api.Session`): the last run's memo as it stands in memory,
            # named by absolute path already: nothing decoded, renamed or unpacked.
            prev, prev_steps = after.carried(), after.steps
        elif prev is not None:
            prev = _rename(prev, absolute)
            try:
                prev_steps = _unpack_steps(prev, self.tracker)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):  # damaged: compute everything
                prev = None
        self.prev_keys: dict[str, str] = prev["keys"] if prev else {}
        self.prev_queries: dict[QueryKey, frozenset[str]] = prev["queries"] if prev else {}
        self.prev_steps = prev_steps
        self.prev_diagnostics: dict[str, list] = prev["diagnostics"] if prev else {}
        prev_modules: dict[str, str] = prev["modules"] if prev else {}
        removed = set(self.prev_keys) - set(self.keys)
        moved = {p for p in self.keys if p in prev_modules and prev_modules[p] != self.modules[p]}
        # A file under a new module name counts as changed: a query may depend on its module.
        self.changed = {p for p, k in self.keys.items() if self.prev_keys.get(p) != k} | moved
        self.invalid: set[str] = self.changed | removed
        self.invalid |= {"m:" + prev_modules.get(p, "") for p in removed | moved}
        self.invalid |= {"m:" + self.modules[p] for p in self.changed if p not in self.prev_keys or p in moved}
        self._query_ok: dict[QueryKey, bool] = {}
        self.queries: dict[QueryKey, frozenset[str]] = {}
        self.steps: dict[StepKey, tuple[Any, frozenset[str]]] = {}
        self.replayed = 0
        self.dirty = prev is None or bool(self.invalid)

    # -- text queries ---------------------------------------------------------------------------
    def select(self, key: QueryKey, full: Callable[[], list]) -> frozenset[str]:
        """The abspaths a query selects: last run's answer updated on the changed files, or ``full()``."""
        got = self.queries.get(key)
        if got is None:
            prev = self.prev_queries.get(key)
            if prev is not None:
                pred = self.predicate(key)
                fresh = {p for p in self.changed if pred(self.index.by_abspath[p], self.index.data(self.index.by_abspath[p]))}
                got = frozenset((prev & self.keys.keys()) - self.changed | fresh)
                self._query_ok[key] = got == prev
            else:
                got = frozenset(sf.abspath for sf in full())
                self.dirty = True
            self.queries[key] = got
        self.tracker.read((query_dep(key),))
        return got

    def _query_valid(self, key: QueryKey) -> bool:
        ok = self._query_ok.get(key)
        if ok is None:
            if key not in self.prev_queries:
                return False
            prev = self.prev_queries[key]
            if not self.changed and not (prev - self.keys.keys()):
                ok = True
                self.queries.setdefault(key, prev)
            else:
                self.select(key, lambda: [])
                ok = self._query_ok.get(key, False)
        return ok

    # -- steps ----------------------------------------------------------------------------------
    def step(self, key: StepKey, compute: Callable[[], Any]) -> Any:
        """The step's value: this run's, last run's when its dependencies are unchanged, or computed."""
        got = self.steps.get(key)
        if got is None:
            got = self._replay(key)
            if got is None:
                with self.tracker.recording() as deps:
                    value = compute()
                got = (value, self.tracker.intern(deps))
                self.dirty = True
            else:
                self.replayed += 1
            self.steps[key] = got
        self.tracker.read(got[1])
        return got[0]

    def peek(self, key: StepKey) -> tuple[bool, Any]:
        """A value this run already holds (its dependencies noted), without computing it."""
        got = self.steps.get(key)
        if got is None:
            return False, None
        self.tracker.read(got[1])
        return True, got[0]

    def has(self, key: StepKey) -> bool:
        """Would :meth:`step` answer without computing?"""
        return key in self.steps or self._replay(key, keep=True) is not None

    def _replay(self, key: StepKey, keep: bool = False) -> tuple[Any, frozenset[str]] | None:
        old = self.prev_steps.get(key)
        if old is None:
            return None
        deps = old[1]
        if deps & self.invalid:
            return None
        for d in deps:
            if d.startswith("q:") and not self._query_valid(_QUERY_KEYS.get(d) or _parse_query(d)):
                return None
        if keep:
            self.steps[key] = old
            self.replayed += 1
        return old

    # -- persistence ----------------------------------------------------------------------------
    def carried(self) -> dict[str, Any]:
        """What the next run needs, in memory and by absolute path: this run's keys, queries and steps, plus
        last run's still valid (:attr:`steps` holds them all afterwards). The one merge behind :meth:`snapshot`
        (stored) and ``Memo(index, predicate, after=self)`` (the next run in the same process).

        A step or query this run did not ask for (a ``--only`` run checks few files) is carried
        over when its dependencies are unchanged, a query after updating it on the changed files.
        """
        for key in list(self.prev_queries):
            if key not in self.queries:
                self.select(key, lambda: [])
        for key in self.prev_steps:
            if key not in self.steps:
                self._replay(key, keep=True)
        used = self.used_files()
        diagnostics = {p: ds for p, ds in self.prev_diagnostics.items() if p in used and p not in self.changed}
        diagnostics.update((p, ds) for p, ds in self.index.file_diagnostics.items() if p in used)
        return {"version": MEMO_VERSION, "keys": self.keys, "modules": self.modules, "queries": self.queries,
                "diagnostics": diagnostics}

    def snapshot(self) -> dict[str, Any]:
        """:meth:`carried` as stored: steps packed into tables (:func:`_pack_steps`), files named root-relative."""
        doc = self.carried()
        steps, depsets, depnames = _pack_steps(self.steps)
        return _rename({**doc, "steps": steps, "depsets": depsets, "depnames": depnames}, self._rel)

    def used_files(self) -> set[str]:
        """Every file a step held now depends on."""
        out: set[str] = set()
        for _, deps in self.steps.values():
            out |= deps
        return {d for d in out if d in self.keys}

    def carried_diagnostics(self) -> list:
        """Parse diagnostics of unchanged files that replayed steps depend on (not re-read this run)."""
        used = self.used_files()
        return [d for p in sorted(used & self.prev_diagnostics.keys()) if p not in self.changed
                for d in self.prev_diagnostics[p]]


def _pack_steps(steps: dict[StepKey, tuple[Any, frozenset[str]]]
                ) -> tuple[dict[StepKey, tuple[Any, int]], list[tuple[int, ...]], list[str]]:
    """Steps with each dependency set replaced by its number in a table of distinct sets, whose
    members are numbers in a table of names. PERF: stored whole, the sets made the memo of both
    wheels 760 MB of JSON (and its encoding peak at 3.9 GB); as tables, a few MB."""
    names: dict[str, int] = {}
    sets: dict[frozenset[str], int] = {}
    table: list[tuple[int, ...]] = []
    out: dict[StepKey, tuple[Any, int]] = {}
    for key, (value, deps) in steps.items():
        n = sets.get(deps)
        if n is None:
            n = sets[deps] = len(table)
            table.append(tuple(sorted(names.setdefault(d, len(names)) for d in deps)))
        out[key] = (value, n)
    return out, table, list(names)


def _unpack_steps(prev: dict[str, Any], tracker: Tracker) -> dict[StepKey, tuple[Any, frozenset[str]]]:
    """:func:`_pack_steps` undone (on a snapshot whose names are already absolute again)."""
    names, table = prev["depnames"], prev["depsets"]
    sets = [tracker.intern(names[i] for i in t) for t in table]
    return {key: (value, sets[n]) for key, (value, n) in prev["steps"].items()}


_QUERY_KEYS: dict[str, QueryKey] = {}


def query_dep(key: QueryKey) -> str:
    d = "q:" + repr(key)
    _QUERY_KEYS[d] = key
    return d


def _parse_query(dep: str) -> QueryKey:
    import ast

    return ast.literal_eval(dep[2:])


def tree_digest(index: Index) -> str:
    """A digest of the indexed tree: every file's root-relative id, module name and content key.

    Two runs with the same configuration and the same digest have the same outcome (a scan is a
    pure function of both), so a warm scan of an unchanged tree replays it whole
    (:func:`castfind.pipeline.run`) instead of replaying its steps one by one.
    """
    # PERF: asked by each carried result a warm scan reads (outcome, costs, ignore comments). An index's
    # files are only ever added to, and a file's key is fixed once found, so its file count names its tree.
    # A digest the tree indexes stored for this very tree is reused (Index.stored_tree_digest; a change to
    # how it is computed must bump cache.TREE_VERSION, which discards the stored ones).
    n = len(index.files)
    digests = _tables(index).tree_digests
    got = digests.get(n)
    if got is None:
        got = index.stored_tree_digest()
        if got is None:
            ids = file_ids(index)
            rows = sorted((ids[sf.abspath], sf.module, index.key(sf)) for sf in index.files)
            got = hashlib.blake2b(repr(rows).encode(), digest_size=16).hexdigest()
        digests[n] = got
        index.note_tree_digest(got)  # stored with the tree indexes (Index.save) when it is discovery's tree
    return got


def load_for_tree(index: Index, key: str) -> dict[str, Any] | None:
    """The row stored under ``key`` by :func:`store_for_tree`, when it was stored for this very tree
    (same :func:`tree_digest`); None when absent, damaged, of another version or of another tree.

    The one mechanism behind every carried result (a scan's whole outcome, its costs, a ``where``
    answer): each is a pure function of its key and the tree.
    """
    assert index.cache is not None
    doc = loads(index.cache.get_memo(key))
    return doc if doc is not None and same_tree(index, doc) else None


def same_tree(index: Index, doc: dict[str, Any]) -> bool:
    """Was ``doc`` (a row of :func:`store_for_tree`) stored for the tree ``index`` holds now?"""
    return doc.get("tree") == tree_digest(index)


def store_for_tree(index: Index, key: str, payload: dict[str, Any]) -> None:
    """Store ``payload`` under ``key`` with this tree's digest (read back by :func:`load_for_tree`); nothing
    when a file was edited during the run (:attr:`Index.raced`: what was computed is of no one tree)."""
    assert index.cache is not None
    if index.raced:
        return
    index.cache.put_memo(key, dumps({**payload, "version": MEMO_VERSION, "tree": tree_digest(index)}))


def store_for_reads(index: Index, key: str, payload: dict[str, Any], deps: Iterable[str], names: Iterable[str]) -> None:
    """Store ``payload`` under ``key`` with what it was computed from (read back by :func:`load_for_reads`): ``deps``,
    the dependencies recorded while it was computed (:meth:`Tracker.recording`: the files whose facts or text it
    read, by absolute path, and ``m:<module>``, a module looked for and not found), and ``names``, the names it
    looked for in the text of the files it did not read (:mod:`castfind.store.words`); the files holding one
    of them must be among ``deps``. Every other file is stamped by its stat alone, in one digest: nothing is read
    or hashed that the computation did not read. Nothing is stored when a file was edited during the run."""
    assert index.cache is not None
    if index.raced:
        return
    ids = file_ids(index)
    deps = set(deps)
    files = {ids[sf.abspath]: (sf.module, index.key(sf)) for sf in index.files if sf.abspath in deps}
    missing = sorted(d[2:] for d in deps if d.startswith("m:"))
    index.cache.put_memo(key, dumps({**payload, "version": MEMO_VERSION, "reads": files, "missing": missing,
                                     "names": sorted(set(names)), "rest": _rest_digest(index, files),
                                     "stamp": index.stamp()}))


def _rest_digest(index: Index, files: dict[str, Any]) -> str:
    """A digest of the files not in ``files`` (by id): their ids, module names and stats."""
    ids = file_ids(index)
    rows = sorted((ids[sf.abspath], sf.module, index.stat(sf)) for sf in index.files if ids[sf.abspath] not in files)
    return hashlib.blake2b(repr(rows).encode(), digest_size=16).hexdigest()


def load_for_reads(index: Index, key: str) -> dict[str, Any] | None:
    """The row :func:`store_for_reads` stored under ``key``, when what it was computed from is as it was; else None.

    It stands when every file it read is there under the same module name and content key (the stat index
    spares hashing an unchanged one), no module it looked for and did not find exists now, and no other file
    holds one of the names it looked for: when the other files' stats are all as they were, that is known
    without reading them; when one differs (a file edited, added or removed), their text is searched for the
    names (a whole-identifier test, as :mod:`castfind.store.words` makes), and if none holds one the row stands
    and is stored again with their stats, so the next load reads nothing more. A row stored with the stamp of the
    tree discovery found now (:meth:`~castfind.store.index.Index.stamp`: the same files and stats) stands without
    any of those checks; a row that stands is stored again with the stamp, when it had another."""
    assert index.cache is not None
    doc = loads(index.cache.get_memo(key))
    stamp = None if doc is None else _reads_stand(index, doc)
    if doc is None or stamp is None:
        return None
    now = {"rest": stamp, "stamp": index.stamp()}
    if any(doc.get(k) != v for k, v in now.items()) and not index.raced:
        doc = {**doc, **now}
        index.cache.put_memo(key, dumps(doc))
    return doc


def current(index: Index, doc: dict[str, Any]) -> bool:
    """Was ``doc`` (a row of :func:`store_for_reads` or :func:`store_for_tree`) computed from what the index holds
    now?"""
    return same_tree(index, doc) if "tree" in doc else _reads_stand(index, doc) is not None


def _reads_stand(index: Index, doc: dict[str, Any]) -> str | None:
    """The stats' digest of the files ``doc`` (a row of :func:`store_for_reads`) did not read, when it stands on the
    index as it is (:func:`load_for_reads`); None when it does not."""
    files, missing, names, rest = doc.get("reads"), doc.get("missing"), doc.get("names"), doc.get("rest")
    if not (isinstance(files, dict) and isinstance(missing, list) and isinstance(names, list)
            and isinstance(rest, str)):
        return None
    if index.found_stamp(doc.get("stamp")):
        # PERF: discovery found the very files and stats of the run that stored it (Index.stamp): nothing to
        # check file by file (~60 ms of ids, stats and a digest on both wheels, most of a warm lookup's own work).
        return rest
    ids = file_ids(index)
    by_id = {v: k for k, v in ids.items()}
    for fid, row in files.items():
        sf = index.by_abspath.get(by_id.get(fid, ""))
        if sf is None or not isinstance(row, tuple) or len(row) != 2 or sf.module != row[0] or index.key(sf) != row[1]:
            return None
    if missing:
        modules = {sf.module for sf in index.files}
        if any(m in modules for m in missing):
            return None
    stamp = _rest_digest(index, files)
    if stamp != rest:
        words = [str(n).encode() for n in names]
        if any(has_word(index.data(sf), w) for sf in index.files if ids[sf.abspath] not in files for w in words):
            return None  # a file it did not read holds a name it looked for now
    return stamp


def root_ids(index: Index) -> dict[str, str]:
    """The root as typed → its number in :func:`file_ids` (what a stored finding names its root by)."""
    return {root: str(n) for root, n in _numbering(index)[1].items()}


def file_ids(index: Index) -> dict[str, str]:
    """abspath → ``N:path``: the file's path inside its root, N numbering the roots by name."""
    n = len(index.files)
    table = _tables(index).file_ids
    got = table.get(n)
    if got is None:
        order = _numbering(index)[0]
        got = table[n] = {sf.abspath: f"{order[sf.abspath.removesuffix(sf.path)]}:{sf.path}" for sf in index.files}
    return got


def _numbering(index: Index) -> tuple[dict[str, int], dict[str, int]]:
    """The roots' numbers: by base folder (a file's abspath less its root-relative path) and by the root
    as typed. PERF: one pass of set building; asked several times a run (memoised by file count, as
    :func:`tree_digest` is: an index's files are only added to)."""
    n = len(index.files)
    table = _tables(index).root_numbers
    got = table.get(n)
    if got is None:
        pairs = {(sf.root, sf.abspath.removesuffix(sf.path)) for sf in index.files}
        order = {b: i for i, b in enumerate(sorted({b for _, b in pairs}, key=lambda b: (Path(b).name, b)))}
        got = table[n] = (order, {root: order[b] for root, b in pairs})
    return got


def _rename(obj: Any, names: dict[str, str]) -> Any:
    """``obj`` with every string that is a key of ``names`` replaced (in keys, tuples, sets, lists)."""
    t = type(obj)
    if t is str:
        return names.get(obj, obj)
    if t is tuple:
        return tuple(_rename(x, names) for x in obj)
    if t is frozenset:
        return frozenset(_rename(x, names) for x in obj)
    if t is list:
        return [_rename(x, names) for x in obj]
    if t is dict:
        return {_rename(k, names): _rename(v, names) for k, v in obj.items()}
    return obj  # records (findings, diagnostics) hold root-relative paths only


def dumps(snapshot: dict[str, Any]) -> bytes:
    """The snapshot in castfind's data-only encoding (:mod:`castfind.read.codec`)."""
    return codec.dumps(snapshot)


def loads(blob: bytes | None) -> dict[str, Any] | None:
    """A stored snapshot, or None when absent or unreadable (then everything is computed)."""
    if blob is None:
        return None
    try:
        got = codec.loads(blob)
    except codec.CodecError:  # any damage means "no memo", never a crash
        return None
    return got if isinstance(got, dict) and got.get("version") == MEMO_VERSION else None
