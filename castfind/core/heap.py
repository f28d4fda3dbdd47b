"""Heap: full garbage collections that do not walk again what survived the last one, while a scan runs.

PERF: a cold scan of both wheels builds about 6 million long-lived objects in the main process (facts,
carried steps, text-query answers). CPython's cyclic collector runs a full (generation 2) collection each
time the objects promoted since the last one reach a quarter of the long-lived ones, and each walks the
whole heap: 29 full collections took 31 s of a 232 s cold scan. :func:`survivors_frozen` moves what
survives each full collection out of the collector's reach (``gc.freeze``): the schedule is the same, but
a collection walks only what is new since the last one (189 collections, 2.8 s, same findings, peak RSS
900 MB against 920). On exit ``gc.unfreeze`` hands the frozen objects back to the collector, so cyclic
garbage left during the run is reclaimed afterwards; acyclic objects are freed by reference counting as
ever. A process that froze objects itself (``gc.freeze`` before a fork) is left alone: nothing is done.

A long-lived process (the language server) keeps millions of objects warm between requests; unfrozen, a full
collection during a request walks them all (a third of a second on both wheels, every few go-to-definitions).
:func:`settle`, called when it is idle, collects everything once and freezes what survives; :func:`freeze_all`,
called after each request, freezes what the request left without walking it (its garbage waits for the next
settle).

Parsing one file (:func:`collector_paused`, around :func:`castfind.read.extract.extract_source`) builds hundreds of
thousands of short-lived, acyclic objects (libcst's tokens and nodes, freed by reference counting when the walk
ends); each 700 allocations start a young collection, and every few of those an older one, which walk them and,
in a lookup that holds the index's facts, the long-lived ones too. The collector is paused while one file is
parsed and resumed after it, whatever the parse raised.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["collector_paused", "freeze_all", "settle", "survivors_frozen"]

_lock = threading.Lock()
_depth = 0  # nested or concurrent runs inside survivors_frozen (only the outermost one engages)
_engaged = False
#: Did :func:`settle` or :func:`freeze_all` freeze the heap? PERF: then :func:`survivors_frozen` knows the heap is
#: frozen without ``gc.get_freeze_count()``, which walks every frozen object (0.97 s of each save in a language
#: server warm on both wheels). A ``gc.unfreeze`` by someone else leaves it set: the scan then freezes nothing of
#: its own (slower collections, same results).
_froze = False
_paused = 0  # blocks inside collector_paused, in any thread (only the outermost one disables and re-enables)
_disabled = False  # collector_paused disabled the collector (it was enabled when the first block began)


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


@contextmanager
def survivors_frozen() -> Iterator[None]:
    """While the block runs, freeze the survivors of every full collection; unfreeze them on exit."""
    global _depth, _engaged
    with _lock:
        _depth += 1
        if _depth == 1 and not _froze and gc.get_freeze_count() == 0:
            gc.callbacks.append(_freeze_survivors)
            _engaged = True
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _engaged:
                gc.callbacks.remove(_freeze_survivors)
                _engaged = False
                gc.unfreeze()


def settle() -> None:
    """Collect all garbage now and freeze what survives, so that collections until the next call walk only what
    is new: for a long-lived process between requests (the language server, once its saves pause). Unfreezes
    first, so cyclic garbage among what an earlier call froze is reclaimed; does nothing while a scan is inside
    :func:`survivors_frozen` (its own freezing goes on)."""
    global _froze
    with _lock:
        if _depth:
            return
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _froze = True


def freeze_all() -> None:
    """Freeze every object now, so that collections until the next :func:`settle` walk only what is new. PERF: no
    walk (the collector's lists are moved aside), so a long-lived process may call it after every request; cycles
    that are garbage already are reclaimed by the next :func:`settle`, not before. Does nothing while a scan is
    inside :func:`survivors_frozen`."""
    global _froze
    with _lock:
        if not _depth:
            gc.freeze()
            _froze = True


@contextmanager
def collector_paused() -> Iterator[None]:
    """While the block runs, the cyclic collector does not run; on exit (the last block to end, in any thread)
    it is enabled again if it was enabled when the first began, whether the block returned or raised.
    Re-entrant and thread-safe; a collector someone else disabled stays disabled. Explicit collections
    (:func:`settle`, ``gc.collect``) still run, and :func:`survivors_frozen` goes on freezing around them.
    PERF: for work that builds many short-lived acyclic objects (a file's parse)."""
    global _paused, _disabled
    with _lock:
        _paused += 1
        if _paused == 1 and gc.isenabled():
            gc.disable()
            _disabled = True
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _disabled:
                _disabled = False
                gc.enable()
