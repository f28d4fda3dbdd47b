"""Words: which files hold a name as a whole identifier, found from their text without parsing.

PERF: a few look-ups scan the bytes directly; after :data:`_SCAN_QUERIES` of them (a scan's call
graph asks hundreds) an inverted index is built once per :class:`~castfind.store.index.Index` — each
file's identifier set read from the cache, keyed by the file's content, when it holds them — and
look-ups become unions of posting lists. One index is shared by every :class:`Words` over the same
:class:`~castfind.store.index.Index` (the resolver, the scan's text queries and the cost model each make
one). Memory: an identifier is stored once with the positions of the files that hold it (about
90 MB for both wheels, where a frozenset of identifiers per file and per :class:`Words` took ~320 MB
each).
"""

from __future__ import annotations

import re
import weakref
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from castfind.core.sourcetext import has_word
from castfind.store.discover import SourceFile
from castfind.store.index import Index

# After this many text look-ups, switch to per-file identifier sets.
_SCAN_QUERIES = 12
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


class _Postings:
    """Identifier → positions (in ``index.files``) of the files that hold it, for the first ``done`` files."""

    __slots__ = ("by_word", "done")

    def __init__(self) -> None:
        self.by_word: dict[bytes, array[int]] = {}
        self.done = 0

    def add(self, pos: int, words: Iterable[bytes]) -> None:
        by_word = self.by_word
        for w in words:
            got = by_word.get(w)
            if got is None:
                by_word[w] = array("I", (pos,))
            else:
                got.append(pos)


#: Each live index's inverted index (built on first need); an index no one holds any more takes it with it.
_POSTINGS: weakref.WeakKeyDictionary[Index, _Postings] = weakref.WeakKeyDictionary()


class _Scanned:
    """Name → positions (in ``index.files``) of the files whose text holds it, for the first ``done[name]`` files:
    the text scans made before the inverted index is built, each name's once per index. PERF: a ``where`` asks
    for the same names several times (the bindings, each round of the alias search, the call sites), each a
    scan of every file's bytes (8,000 on both wheels)."""

    __slots__ = ("done", "hits", "open")

    def __init__(self) -> None:
        self.hits: dict[str, array[int]] = {}
        self.done: dict[str, int] = {}
        self.open: list[set[str]] = []  # the recordings of :func:`names_asked` in progress

    def positions(self, index: Index, name: str) -> array[int]:
        """The positions of the files holding ``name``, scanning only the files added since it was last asked."""
        got = self.hits.get(name)
        if got is None:
            got = self.hits[name] = array("I")
        start, files = self.done.get(name, 0), index.files
        if start < len(files):
            word, data = name.encode(), index.data
            got.extend(i for i in range(start, len(files)) if has_word(data(files[i]), word))
            self.done[name] = len(files)
        return got


@contextmanager
def names_asked(index: Index) -> Iterator[set[str]]:
    """Collect every name any :class:`Words` over ``index`` is asked for while the block runs (what a computation's
    answer depends on of the text of the files it did not read: a ``where`` answer carried by what it read)."""
    scanned = _scanned(index)
    names: set[str] = set()
    scanned.open.append(names)
    try:
        yield names
    finally:
        scanned.open[:] = [n for n in scanned.open if n is not names]


#: Each live index's text scans by name (:class:`_Scanned`); an index no one holds any more takes them with it.
_SCANNED: weakref.WeakKeyDictionary[Index, _Scanned] = weakref.WeakKeyDictionary()


def _scanned(index: Index) -> _Scanned:
    got = _SCANNED.get(index)
    if got is None:
        got = _SCANNED[index] = _Scanned()
    return got


class Words:
    """Identifier look-ups over an :class:`~castfind.store.index.Index`'s files."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._queries = 0

    def containing(self, names: Iterable[str], files: Iterable[SourceFile] | None = None) -> list[SourceFile]:
        """Files whose text holds any of ``names`` as a whole identifier (comments and strings count),
        in the order of ``files`` (default: the index's files)."""
        wanted = [n for n in dict.fromkeys(names) if n]
        if not wanted:
            return []
        self._queries += 1
        index = self.index
        got = _SCANNED.get(index)
        if got is not None:
            for names_open in got.open:
                names_open.update(wanted)
        if self._queries > _SCAN_QUERIES or index in _POSTINGS:
            postings = self._postings()
            hits: set[int] = set()
            for n in wanted:
                hits.update(postings.by_word.get(n.encode(), ()))
            if files is None:
                return [index.files[i] for i in sorted(hits)]
            chosen = {index.files[i].abspath for i in hits}
            return [sf for sf in files if sf.abspath in chosen]
        if files is not None:
            pool = list(files)
            enc = [n.encode() for n in wanted]
            return [sf for sf in pool if any(has_word(index.data(sf), n) for n in enc)]
        scanned = _scanned(index)
        hit: set[int] = set()
        for n in wanted:
            hit.update(scanned.positions(index, n))
        return [index.files[i] for i in sorted(hit)]

    def _postings(self) -> _Postings:
        """The index's inverted index, extended to files added since it was built."""
        index = self.index
        postings = _POSTINGS.get(index)
        if postings is None:
            postings = _POSTINGS[index] = _Postings()
        if postings.done < len(index.files):
            self._extend(postings)
        return postings

    def _extend(self, postings: _Postings) -> None:
        index = self.index
        new = index.files[postings.done:]
        keys = {sf.abspath: index.key(sf) for sf in new}
        index.save_stats()
        cached = index.cache.get_idents(keys.values()) if index.cache else {}
        fresh: dict[str, bytes] = {}
        for pos, sf in enumerate(new, postings.done):
            k = keys[sf.abspath]
            blob = cached.get(k)
            if blob is not None:
                postings.add(pos, blob.split(b"\n"))
            else:
                words = set(_WORD.findall(index.data(sf)))
                postings.add(pos, words)
                fresh[k] = b"\n".join(sorted(words))
        postings.done += len(new)
        if index.cache and fresh:
            index.cache.put_idents(fresh)


def carry_postings(index: Index, previous: Index) -> None:
    """Hand ``index`` the inverted index ``previous`` built (the last run's index of the same files, in this
    process: :meth:`Index.adopt <castfind.store.index.Index.adopt>`), with the files whose content key changed
    taken out under their old identifiers and put back under their new ones. ``previous`` has none afterwards.
    When ``previous`` built none, its files are not ``index``'s in the same order, or a changed file's old
    identifiers are known neither from the cache nor from memory, ``index`` builds its own now, so the next
    run in this process carries it.

    PERF: the cost model and the resolver look up names across every file; without it, each warm scan after an
    edit scanned every file's bytes a dozen times before building the index again (seconds on the sglang wheel).
    """
    postings = _POSTINGS.get(previous)
    if (postings is None or postings.done != len(previous.files) or len(index.files) != len(previous.files)
            or any(a.abspath != b.abspath for a, b in zip(index.files, previous.files, strict=True))):
        Words(index)._postings()
        return
    changed = [(pos, sf, previous.key(previous.files[pos])) for pos, sf in enumerate(index.files)
               if index.key(sf) != previous.key(previous.files[pos])]
    cached = previous.cache.get_idents(old for _, _, old in changed) if previous.cache and changed else {}
    old_words: list[Iterable[bytes]] = []
    for pos, sf, old in changed:
        blob = cached.get(old)
        if blob is not None:
            old_words.append(blob.split(b"\n"))
        elif previous.holds_data(sf.abspath):
            old_words.append(set(_WORD.findall(previous.data(previous.files[pos]))))
        else:
            Words(index)._postings()
            return
    for (pos, sf, _), words in zip(changed, old_words, strict=True):
        for w in words:
            got = postings.by_word.get(w)
            if got is not None and pos in got:
                got.remove(pos)
        postings.add(pos, set(_WORD.findall(index.data(sf))))
    del _POSTINGS[previous]
    _POSTINGS[index] = postings
