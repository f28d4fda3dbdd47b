"""How a name castfind did not choose (a file path, a module named after one) is shown to a person.

A file name may hold any byte but ``/`` and NUL: a newline (which would start a new output line, and
on GitHub Actions a workflow command), an ANSI escape, bytes that are not UTF-8 (which Python keeps as
lone surrogates and cannot write). :func:`shown` is the one place they are made safe to print; every
text format and diagnostic line goes through it. JSON and SARIF escape by their own rules (SARIF URIs
are percent-encoded), and :func:`utf8_name` tells discovery which names it cannot report at all.
"""

from __future__ import annotations

__all__ = ["shown", "utf8_name"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): show the byte
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """``text`` with every character that is not printable (control characters, line and paragraph
    separators, bidirectional overrides, undecodable bytes) written as a Python-style escape:
    ``x\\n.py``, ``bad\\xff.py``. Printable text, spaces included, is returned unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else _escape(ch) for ch in text)


def utf8_name(name: str) -> bool:
    """Whether a name from the file system is valid UTF-8 (not decoded with surrogate escapes)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
