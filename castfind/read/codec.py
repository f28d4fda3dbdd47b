"""A data-only encoding for everything castfind stores: per-file facts and carried scan results.

A cache may be shared between machines or restored by CI, so reading it must never run code the
data names (``pickle`` does: a forged row is a program). This encoding is JSON whose arrays carry
a tag in their first element: ``["t", ...]`` a tuple, ``["l", ...]`` a list, ``["f", ...]`` a
frozenset, ``["s", ...]`` a set, ``["d", k, v, ...]`` a dict, ``["b", "<base64>"]`` bytes,
``["x", "nan"]`` a non-finite float, and ``["<RecordName>", field, ...]`` one of the plain records
:func:`records` lists — the only classes decoding can build, by calling their constructor with
the stored field values. Anything else is a :class:`CodecError`.
"""

from __future__ import annotations

import base64
import json
import math
import sys
import zlib
from dataclasses import fields
from typing import Any

from castfind.core import types as _t

#: The fact records (:mod:`castfind.read.facts`) that may be stored and rebuilt, by name. PERF: that module
#: (twenty dataclasses, a third of a warm ``where``'s imports) is imported on the first fact record
#: encoded or decoded (:func:`_facts_records`), never by a run that reads only carried answers.
_FACT_RECORDS = ("Name", "Attr", "Call", "Slice", "Subscript", "Const", "Seq", "Other", "Import", "Assign",
                 "CallSite", "Return", "Guard", "Cast", "Definition", "Dynamic", "FileFacts", "Annotation",
                 "LazyExport", "Allocation", "Produced")
#: The other records that may be stored and rebuilt (all frozen dataclasses of plain values).
_SHARED_RECORDS: tuple[type, ...] = (_t.Finding, _t.Runtime, _t.Diagnostic, _t.Cost, _t.CostCheck,
                                     _t.Condition, _t.Guess)
_FIELDS: dict[type, tuple[str, ...]] = {}
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class CodecError(ValueError):
    """Stored bytes that are not a valid encoding (damaged, forged, or from another version)."""


def _enc(o: Any) -> Any:
    t = type(o)
    if t is str or t is int or t is bool or o is None:
        return o
    # PERF: a file's facts are ~100,000 records and tuples, most of whose items are strings and numbers:
    # records come first, and leaves are kept inline rather than through a call.
    names = _FIELDS.get(t)
    if names is not None:
        out: list[Any] = [t.__name__]
        for n in names:
            v = getattr(o, n)
            tv = type(v)
            out.append(v if tv is str or tv is int or tv is bool or v is None else _enc(v))
        return out
    if t is tuple:
        return ["t", *[x if type(x) is str or type(x) is int else _enc(x) for x in o]]
    if t is float:
        return o if math.isfinite(o) else ["x", repr(o)]
    if t is list:
        return ["l", *[_enc(x) for x in o]]
    if t is frozenset or t is set:
        return ["f" if t is frozenset else "s", *[_enc(x) for x in o]]
    if t is dict:
        out = ["d"]
        for k, v in o.items():
            out.append(_enc(k))
            out.append(_enc(v))
        return out
    if t is bytes:
        return ["b", base64.b64encode(o).decode("ascii")]
    if _facts_records():
        return _enc(o)
    raise TypeError(f"castfind.read.codec cannot store a {t.__name__}")


def _dec(o: Any) -> Any:
    if type(o) is list:
        if not o:
            raise CodecError("an array without a tag")
        f = _DECODERS.get(o[0]) if type(o[0]) is str else None
        if f is None:
            if type(o[0]) is str and o[0] in _FACT_RECORDS and _facts_records():
                return _dec(o)
            raise CodecError(f"unknown tag {o[0]!r}")
        return f(o)
    if type(o) is dict:
        raise CodecError("a JSON object where a value was expected")
    return o


# PERF: a warm scan decodes hundreds of thousands of these arrays. Leaves (strings, numbers) are
# returned inline rather than through a call, and each tag has its own small function. Strings are
# interned: facts repeat the same scope, module and callee names thousands of times, and JSON makes a
# new object for each (the facts of the ~2,250 files a scan of both wheels reads took 830 MB so,
# ~40% less interned, at no measurable cost in time).
_intern = sys.intern


def _items(o: list[Any]) -> list[Any]:
    return [(_intern(x) if type(x) is str else x) if type(x) is not list else _dec(x) for x in o[1:]]


def _float(o: list[Any]) -> float:
    if len(o) != 2 or o[1] not in _FLOATS:
        raise CodecError(f"unknown float {o[1:]!r}")
    return _FLOATS[o[1]]


def _dict(o: list[Any]) -> dict[Any, Any]:
    it = iter(_items(o))
    return dict(zip(it, it, strict=False))  # pairs: (k1, v1, k2, v2, ...)


def _record(cls: type) -> Any:
    n = len(_FIELDS[cls])

    def build(o: list[Any]) -> Any:
        if len(o) != n + 1:
            raise CodecError(f"{o[0]} with {len(o) - 1} fields, expected {n}")
        return cls(*[(_intern(x) if type(x) is str else x) if type(x) is not list else _dec(x) for x in o[1:]])

    return build


_DECODERS: dict[str, Any] = {
    "t": lambda o: tuple(_items(o)),
    "l": _items,
    "f": lambda o: frozenset(_items(o)),
    "s": lambda o: set(_items(o)),
    "d": _dict,
    "b": lambda o: base64.b64decode(o[1]),
    "x": _float,
}


def _register(classes: tuple[type, ...]) -> None:
    for c in classes:
        _FIELDS[c] = tuple(f.name for f in fields(c))
        _DECODERS[c.__name__] = _record(c)


def _facts_records() -> bool:
    """Register the fact records (once); False when they already were."""
    if "FileFacts" in _DECODERS:
        return False
    from castfind.read import facts

    _register(tuple(getattr(facts, name) for name in _FACT_RECORDS))
    return True


def records() -> tuple[type, ...]:
    """Every class decoding can build."""
    _facts_records()
    return tuple(_FIELDS)


_register(_SHARED_RECORDS)


def dumps(obj: Any) -> bytes:
    """Compressed JSON of ``obj`` (plain values, containers and :func:`records` only)."""
    return zlib.compress(json.dumps(_enc(obj), separators=(",", ":"), ensure_ascii=False,
                                    allow_nan=False).encode("utf-8"), 1)


def loads(blob: bytes) -> Any:
    """The value :func:`dumps` stored. Raises :class:`CodecError` for anything else; builds only
    plain values and :func:`records`, so damaged or forged bytes can never run code."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError, RecursionError) as e:
        raise CodecError(f"not a castfind encoding: {e}") from None
    try:
        return _dec(doc)
    except (TypeError, RecursionError, IndexError, ValueError) as e:  # a record built with values of the wrong shape
        raise CodecError(f"malformed record: {e}") from None
