"""The cast methods castfind knows: one table, read by the extractor, the rules and the runtime.

A method named here is recorded by the extractor (:mod:`castfind.read.extract`), may be named in a rule's
``cast:`` list with the operand and dtype given here as defaults (a rule file's ``casts:`` table may
only override them, :mod:`castfind.core.rules`), and is a candidate line when the runtime importer puts a
profiled ``aten::_to_copy`` / ``aten::copy_`` back on its source line (:mod:`castfind.runtime.source`).
Adding a cast method is one line in :data:`CASTS` (and a rule example that shows it firing); the
extractor's cache version follows the table by :func:`digest`, so cached facts never miss it.

This module imports nothing heavy (no libcst, no torch): the extractor's spawned workers import it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

#: Which operand a cast method reads: the tensor it is called on, or its first argument (``copy_``).
Operand = Literal["receiver", "argument"]
#: The aten op a cast method dispatches to when it runs.
AtenOp = Literal["aten::_to_copy", "aten::copy_"]

TO_COPY: AtenOp = "aten::_to_copy"
COPY: AtenOp = "aten::copy_"


@dataclass(frozen=True, slots=True)
class CastMethod:
    """One tensor method that may change a dtype, and what castfind assumes about it."""

    name: str
    #: The tensor whose whole-buffer-ness matters: ``x.float()`` reads ``x``, ``dst.copy_(src)`` reads ``src``.
    operand: Operand
    #: The dtype it yields as text for messages; None: taken from its arguments (``.to(q.dtype)``).
    dtype: str | None
    #: What the profiler and the recorder see when it runs.
    aten: AtenOp
    #: Whether the runtime importer counts its calls when placing a profiled cast on one source line.
    #: ``cfloat``/``cdouble`` never were; counting them now could turn a pinned line into an ambiguous one.
    located: bool = True


#: Every cast method, one per line. The only place a cast method is defined.
CASTS: tuple[CastMethod, ...] = (
    CastMethod("to", "receiver", None, TO_COPY),
    CastMethod("type", "receiver", None, TO_COPY),
    CastMethod("type_as", "receiver", "its argument's dtype", TO_COPY),
    CastMethod("float", "receiver", "float32", TO_COPY),
    CastMethod("half", "receiver", "float16", TO_COPY),
    CastMethod("bfloat16", "receiver", "bfloat16", TO_COPY),
    CastMethod("double", "receiver", "float64", TO_COPY),
    CastMethod("copy_", "argument", "the destination dtype", COPY),
    CastMethod("int", "receiver", "int32", TO_COPY),
    CastMethod("long", "receiver", "int64", TO_COPY),
    CastMethod("short", "receiver", "int16", TO_COPY),
    CastMethod("byte", "receiver", "uint8", TO_COPY),
    CastMethod("char", "receiver", "int8", TO_COPY),
    CastMethod("bool", "receiver", "bool", TO_COPY),
    CastMethod("cfloat", "receiver", "complex64", TO_COPY, located=False),
    CastMethod("cdouble", "receiver", "complex128", TO_COPY, located=False),
)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Lookups built from one version of :data:`CASTS` (rebuilt when the table object changes)."""

    table: tuple[CastMethod, ...]
    by_name: dict[str, CastMethod]
    names: frozenset[str]


_derived: _Derived | None = None


def _current() -> _Derived:
    """Lookups for the table as it is now: a test that replaces :data:`CASTS` is seen at once."""
    global _derived
    table = CASTS
    if _derived is None or _derived.table is not table:
        _derived = _Derived(table, {m.name: m for m in table}, frozenset(m.name for m in table))
    return _derived


def by_name() -> dict[str, CastMethod]:
    """The cast methods keyed by name (do not mutate: it is shared)."""
    return _current().by_name


def names() -> frozenset[str]:
    """The names the extractor records as cast calls."""
    return _current().names


def located_methods(aten: AtenOp) -> frozenset[str]:
    """The methods the runtime importer looks for in a function's source when ``aten`` was profiled there."""
    return frozenset(m.name for m in CASTS if m.aten == aten and m.located)


def digest(table: tuple[CastMethod, ...] | None = None) -> str:
    """A short hash of the table: part of the extractor's version, so a changed table invalidates caches."""
    rows = CASTS if table is None else table
    text = repr(tuple((m.name, m.operand, m.dtype, m.aten, m.located) for m in rows))
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
