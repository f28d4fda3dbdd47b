"""Source text as Python reads it: the declared encoding, and only Python's own line breaks.

``bytes.decode("utf-8")`` fails on a file that declares ``# -*- coding: latin-1 -*-``, and
``str.splitlines()`` also breaks at form feeds and ``\\u2028``, which Python's tokenizer does not:
either would put a suppression comment or a shown line on the wrong line number.
"""

from __future__ import annotations

import io
import re
import tokenize

#: Python's own line breaks (its tokenizer's, and libcst's position provider's).
NEWLINE = re.compile(r"\r\n?|\n")


def decode(data: bytes) -> str:
    """The file's text, decoded as the interpreter would (BOM, coding line, else UTF-8).

    Raises ``UnicodeDecodeError`` (or ``SyntaxError`` for an unknown codec) where Python would.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def lines(text: str) -> list[str]:
    """Lines without their ends, split at ``\\r\\n``, ``\\r`` and ``\\n`` only (index 0 is line 1)."""
    out = NEWLINE.split(text)
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
#: comments (the text pre-filters of :mod:`castfind.textquery` and :mod:`castfind.where`).
CALL_GAP = rb"(?:\s|\\\r?\n|#[^\n]*\n)*"
