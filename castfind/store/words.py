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
from array import array
from collections.abc import Iterable

from castfind.store.discover import SourceFile
from castfind.store.index import Index

# After this many text look-ups, switch to per-file identifier sets.
_SCAN_QUERIES = 12
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def _is_ident_byte(b: int) -> bool:
    return b == 95 or 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122


def has_word(data: bytes, word: bytes) -> bool:
    """``word`` occurs in ``data`` with no identifier character on either side."""
    i = data.find(word)
    n = len(word)
    while i >= 0:
        before = data[i - 1] if i > 0 else 32
        after = data[i + n] if i + n < len(data) else 32
        if not _is_ident_byte(before) and not _is_ident_byte(after):
            return True
        i = data.find(word, i + 1)
    return False


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
        if self._queries > _SCAN_QUERIES or index.postings is not None:
            postings = self._postings()
            hits: set[int] = set()
            for n in wanted:
                hits.update(postings.by_word.get(n.encode(), ()))
            if files is None:
                return [index.files[i] for i in sorted(hits)]
            chosen = {index.files[i].abspath for i in hits}
            return [sf for sf in files if sf.abspath in chosen]
        pool = index.files if files is None else list(files)
        enc = [n.encode() for n in wanted]
        return [sf for sf in pool if any(has_word(index.data(sf), n) for n in enc)]

    def _postings(self) -> _Postings:
        """The index's inverted index, extended to files added since it was built."""
        index = self.index
        postings = index.postings
        if postings is None:
            postings = index.postings = _Postings()
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
