"""When the command now running began: the moment a person started waiting for it, which ``where``'s time
budget counts from (:func:`castfind.api.where`). :mod:`castfind.quick`, the command line's entry, imports it and
sets the time for the command it runs."""

from __future__ import annotations

import time

#: When this module was imported (as the command line's entry was): a process's first command began no later.
IMPORTED = time.monotonic()

_started: float | None = None
_first = True


def begin() -> None:
    """A command begins: the process's first began when this module was imported, a later one now."""
    global _started, _first
    _started, _first = (IMPORTED if _first else time.monotonic()), False


def end() -> None:
    """The command is over: :func:`command_started` is None again."""
    global _started
    _started = None


def command_started() -> float | None:
    """When the command now running began (a :func:`time.monotonic` reading), between :func:`begin` and :func:`end`;
    else None (the library called directly: its own call is when the work began)."""
    return _started
