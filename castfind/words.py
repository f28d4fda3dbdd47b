"""Words: which files hold a name as a whole identifier, found from their text without parsing.

PERF: a few look-ups scan the bytes directly; after :data:`_SCAN_QUERIES` of them (a scan's call
graph asks hundreds) each file's identifier set is built once — from the cache, keyed by the
file's content, when it holds them — and look-ups become set intersections.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from castfind.discover import SourceFile
from castfind.index import Index

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


class Words:
    """Identifier look-ups over an :class:`~castfind.index.Index`'s files."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._idents: dict[str, frozenset[bytes]] = {}
        self._queries = 0

    def containing(self, names: Iterable[str], files: Iterable[SourceFile] | None = None) -> list[SourceFile]:
        """Files whose text holds any of ``names`` as a whole identifier (comments and strings count)."""
        wanted = [n for n in dict.fromkeys(names) if n]
        if not wanted:
            return []
        pool = self.index.files if files is None else list(files)
        self._queries += 1
        if self._queries > _SCAN_QUERIES:
            want = {n.encode() for n in wanted}
            return [sf for sf in pool if not want.isdisjoint(self.identifiers(sf))]
        enc = [n.encode() for n in wanted]
        return [sf for sf in pool if any(has_word(self.index.data(sf), n) for n in enc)]

    def identifiers(self, sf: SourceFile) -> frozenset[bytes]:
        """Every identifier-like word of the file (cached by content hash)."""
        got = self._idents.get(sf.abspath)
        if got is None:
            if not self._idents:
                self._load()
                got = self._idents.get(sf.abspath)
            if got is None:
                got = frozenset(_WORD.findall(self.index.data(sf)))
                self._idents[sf.abspath] = got
        return got

    def _load(self) -> None:
        index = self.index
        keys = {sf.abspath: index.key(sf) for sf in index.files}
        index.save_stats()
        cached = index.cache.get_idents(keys.values()) if index.cache else {}
        fresh: dict[str, bytes] = {}
        for sf in index.files:
            k = keys[sf.abspath]
            blob = cached.get(k)
            if blob is not None:
                self._idents[sf.abspath] = frozenset(blob.split(b"\n"))
            else:
                words = frozenset(_WORD.findall(index.data(sf)))
                self._idents[sf.abspath] = words
                fresh[k] = b"\n".join(sorted(words))
        if index.cache and fresh:
            index.cache.put_idents(fresh)
