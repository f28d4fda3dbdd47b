"""The one internal-error handler of every command (``scan``, ``where``, ``rules ...``, ``init``, ``record``,
``trace ...``): an exception castfind did not expect is one line on stderr,
``castfind: internal error in COMMAND: Type: what (set CASTFIND_DEBUG=1 for the traceback)``, and exit
code 2, never 1 (which means "findings"). ``CASTFIND_DEBUG`` (any value but empty or ``0``) prints the
traceback first. No typer here: :mod:`castfind.cli` and :mod:`castfind.runtime.cli` both call it.
"""

from __future__ import annotations

import os
import sys
import traceback

from castfind.core.names import shown

__all__ = ["DEBUG_ENV", "debug", "internal_error"]

DEBUG_ENV = "CASTFIND_DEBUG"


def debug() -> bool:
    """Whether ``CASTFIND_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def internal_error(command: str, exc: BaseException) -> int:
    """Report ``exc``, raised under ``command``, as above (the message on one line, what is not printable
    escaped) and return the exit code, 2."""
    if debug():
        traceback.print_exception(exc)
    detail = shown(" ".join(str(exc).split()))
    what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    hint = "" if debug() else f" (set {DEBUG_ENV}=1 for the traceback)"
    sys.stderr.write(f"castfind: internal error in {command}: {what}{hint}\n")
    sys.stderr.flush()
    return 2
