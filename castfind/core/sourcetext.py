"""Source text as Python reads it: the declared encoding, and only Python's own line breaks.

``bytes.decode("utf-8")`` fails on a file that declares ``# -*- coding: latin-1 -*-``, and
``str.splitlines()`` also breaks at form feeds and ``\\u2028``, which Python's tokenizer does not:
either would put a suppression comment or a shown line on the wrong line number.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

#: Python's own line breaks (its tokenizer's, and libcst's position provider's).
NEWLINE = re.compile(r"\r\n?|\n")


def word_start(literal: bytes) -> bytes:
    """A byte pattern for ``\\b`` + ``literal`` (a regex-escaped name), written as the name and then a
    look back at the byte before it.

    PERF: ``re`` finds a pattern that starts with literals by a fast scan, but tries every position of
    the text for one that starts with ``\\b``: over both wheels' 168 MB, a pattern of the getter names
    took ~2 s with a leading ``\\b`` and ~0.1 s written so.
    """
    if literal[:1].isascii() and (literal[:1].isalnum() or literal[:1] == b"_"):
        return literal + rb"(?<![A-Za-z0-9_]" + literal + rb")"
    return rb"\b" + literal


def decode(data: bytes) -> str:
    """The file's text, decoded as the interpreter would (BOM, coding line, else UTF-8).

    Raises ``UnicodeDecodeError`` (or ``SyntaxError`` for an unknown codec) where Python would.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def lines(text: str) -> list[str]:
    """Lines without their ends, split at ``\\r\\n``, ``\\r`` and ``\\n`` only (index 0 is line 1)."""
    # PERF: str.split is ~10x faster than the pattern, and the same split when there is no "\r".
    out = text.split("\n") if "\r" not in text else NEWLINE.split(text)
    if out and out[-1] == "":
        out.pop()
    return out


def lenient_lines(data: bytes) -> list[str]:
    """:func:`lines` of the decoded file; undecodable bytes become U+FFFD instead of failing."""
    try:
        text = decode(data)
    except (UnicodeDecodeError, SyntaxError, LookupError):
        text = data.decode("utf-8", "replace")
    return lines(text)


#: What may sit between a callee's name and its ``(`` in source text: whitespace, line continuations,
#: comments (the text pre-filters of :mod:`castfind.store.textquery` and :mod:`castfind.where.lookup`).
CALL_GAP = rb"(?:\s|\\\r?\n|#[^\n]*\n)*"


@dataclass(frozen=True, slots=True)
class TextTest:
    """``pattern.search(data) is not None``, answered by searching only near the ``needles``.

    ``lines``: every match of ``pattern`` lies on one line (no ``\\n`` inside it) holding a needle;
    else every match starts with a needle (its look-behind may read the bytes before).
    PERF: a multi-branch pattern with no literal prefix is tried by ``re`` at every byte (~1 MB/s for
    :mod:`castfind.where.lookup`'s pre-filters: 5 s on torch's files that name ``grad``), while ``bytes.find``
    is memchr-fast; the answer is the same (:meth:`plain` is the reference the tests compare with).
    """

    pattern: re.Pattern[bytes]
    needles: tuple[bytes, ...]
    lines: bool

    def __call__(self, data: bytes) -> bool:
        return (line_search if self.lines else match_search)(self.pattern, data, self.needles)

    def plain(self, data: bytes) -> bool:
        return self.pattern.search(data) is not None


def line_search(pattern: re.Pattern[bytes], data: bytes, needles: Iterable[bytes]) -> bool:
    """Does ``pattern`` match within a line (between two ``\\n``) that holds one of ``needles``?"""
    for needle in needles:
        i = data.find(needle)
        while i >= 0:
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            if end < 0:
                end = len(data)
            if pattern.search(data, start, end) is not None:
                return True
            i = data.find(needle, end)
    return False


def match_search(pattern: re.Pattern[bytes], data: bytes, needles: Iterable[bytes]) -> bool:
    """Does ``pattern`` match starting where one of ``needles`` starts?"""
    for needle in needles:
        i = data.find(needle)
        while i >= 0:
            if pattern.match(data, i) is not None:
                return True
            i = data.find(needle, i + 1)
    return False


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


#: ``import *`` as text (a continuation line between the two too); comments count: a superset.
_STAR_IMPORT = re.compile(rb"\bimport(?:\s|\\)*\*")


def may_bind(data: bytes, name: str) -> bool:
    """Could a module whose source is ``data`` bind ``name`` at its top level, as far as its text tells?

    False only when the code names it nowhere: no ``import *`` (which may bring it from elsewhere), and
    ``name`` is neither a name token nor a whole string literal (an ``__all__`` entry, a ``globals()`` or
    ``setattr`` key) once comments and other strings (docstrings that mention it) are set aside. A def, a
    class, an assignment, an import and an ``__all__`` each need one of those. PERF: a tokenizer pass is
    ~1 MB/s, some twenty times a parse; the bytes are searched first (most files do not hold the name at
    all). A file the tokenizer refuses may bind it (the parse decides)."""
    if _STAR_IMPORT.search(data) is not None:
        return True
    if not has_word(data, name.encode()):
        return False
    try:
        for tok in tokenize.tokenize(io.BytesIO(data).readline):
            if tok.type == tokenize.NAME and tok.string == name:
                return True
            if tok.type == tokenize.STRING and tok.string.lstrip("rRbBuUfF").strip("'\"") == name:
                return True
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError):
        return True
    return False
